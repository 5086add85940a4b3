"""Compare the NumPy reference kernels of add, concat, reshape, batchnorm2d, sigmoid, tanh, leaky_relu,
softmax, log_softmax, layer_norm and batch_norm_train (forward and gradients) with PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from algoswap_numpy import activation, elementwise, norm, shape, softmax  # noqa: E402
from helpers import assert_op_close, check  # noqa: E402

DTYPES = [np.float32, np.float64]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ()), ((), (2, 2)), ((1, 3, 1, 2), (4, 1, 5, 1)),
])
def test_add(rng, a_shape, b_shape, dtype):
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(elementwise.add(a, b), torch.from_numpy(a) + torch.from_numpy(b), dtype, "add", (a, b))


@pytest.mark.parametrize("dtype", DTYPES + [np.int64])
@pytest.mark.parametrize("shapes, axis", [
    (((2, 3, 4, 5), (2, 1, 4, 5), (2, 2, 4, 5)), 1), (((3, 2), (3, 2)), 0), (((2, 3, 4), (2, 3, 2)), 2), (((6,),), 0),
])
def test_concat(rng, shapes, axis, dtype):
    arrays = [(rng.integers(-5, 5, s) if dtype is np.int64 else rand(rng, s, dtype)).astype(dtype) for s in shapes]
    out = shape.concat(*arrays, axis=axis)
    ref = torch.cat([torch.from_numpy(a) for a in arrays], dim=axis)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, ref.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape, target, canonical", [
    ((2, 3, 4, 5), (2, -1), (2, 60)), ((2, 3, 4, 5), (6, 4, 5), (6, 4, 5)), ((24,), (2, 3, -1), (2, 3, 4)), ((2, 6), (-1,), (12,)),
])
def test_reshape(rng, x_shape, target, canonical, dtype):
    x = rand(rng, x_shape, dtype)
    out = shape.reshape(x, shape=canonical)
    ref = torch.from_numpy(x).reshape(target)
    assert out.shape == tuple(ref.shape) and out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, ref.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("x_shape, eps", [((2, 3, 5, 4), 1e-5), ((1, 8, 2, 7), 1e-3), ((3, 1, 4, 4), 0.0)])
def test_batchnorm2d(rng, x_shape, eps, affine, dtype):
    channels = x_shape[1]
    x = rand(rng, x_shape, dtype)
    mean = rand(rng, (channels,), dtype)
    var = (rng.uniform(0.2, 3.0, channels)).astype(dtype)
    weight, bias = (rand(rng, (channels,), dtype), rand(rng, (channels,), dtype)) if affine else (None, None)
    module = torch.nn.BatchNorm2d(channels, eps=eps, affine=affine).eval().to(torch.float64)
    with torch.no_grad():
        module.running_mean.copy_(torch.from_numpy(mean))
        module.running_var.copy_(torch.from_numpy(var))
        if affine:
            module.weight.copy_(torch.from_numpy(weight))
            module.bias.copy_(torch.from_numpy(bias))
        ref = module(torch.from_numpy(x.astype(np.float64)))
    inputs = (x, mean, var, weight, bias)
    check(norm.batchnorm2d(*inputs, eps=eps), ref, dtype, "batchnorm2d", inputs, eps=eps)
    wide = [None if a is None else torch.from_numpy(a.astype(np.float64)) for a in (mean, var, weight, bias)]
    functional = F.batch_norm(torch.from_numpy(x.astype(np.float64)), *wide[:2], *wide[2:], training=False, eps=eps)
    check(norm.batchnorm2d(*inputs, eps=eps), functional, dtype, "batchnorm2d", inputs, eps=eps)


# ------------------------------------------- activations, softmax and norms: forward and autograd

def wide(a: np.ndarray | None, grad: bool = True) -> "torch.Tensor | None":
    """A float64 torch tensor holding exactly the values of ``a`` (None stays None)."""
    return None if a is None else torch.tensor(a.astype(np.float64), requires_grad=grad)


def spread(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Normal draws with a few large magnitudes, to exercise overflow-prone paths."""
    x = rng.standard_normal(shape) * 3
    x.flat[:: 5] *= 30
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape", [(3, 4, 5), (2, 3, 7, 6), (11,)])
@pytest.mark.parametrize("name, slope", [("sigmoid", None), ("tanh", None), ("leaky_relu", 0.01), ("leaky_relu", -0.7)])
def test_activation_forward_and_grad(rng, name, slope, x_shape, dtype):
    x, dy = spread(rng, x_shape, dtype), rand(rng, x_shape, dtype)
    xt = wide(x)
    attrs = {} if slope is None else {"negative_slope": slope}
    torch_fn = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "leaky_relu": F.leaky_relu}[name]
    yt = torch_fn(xt, *attrs.values())
    yt.backward(wide(dy, grad=False))
    y = getattr(activation, name)(x, **attrs)
    check(y, yt, dtype, name, (x,), **attrs)
    second = x if name == "leaky_relu" else y
    check(getattr(activation, f"{name}_grad")(dy, second, **attrs), xt.grad, dtype, f"{name}_grad", (dy, second), **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape, axis", [((3, 7), -1), ((2, 5, 3), 1), ((2, 3, 4, 5), 0), ((4, 3, 5), -2), ((9,), 0)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_and_grad(rng, log, x_shape, axis, dtype):
    x = (rng.standard_normal(x_shape) * 2 + 1000).astype(dtype)  # exp(x) alone would overflow
    dy = rand(rng, x_shape, dtype)
    xt = wide(x)
    yt = (F.log_softmax if log else F.softmax)(xt, dim=axis)
    yt.backward(wide(dy, grad=False))
    name = "log_softmax" if log else "softmax"
    canonical = axis % len(x_shape)
    y = getattr(softmax, name)(x, axis=canonical)
    assert np.all(np.isfinite(y))
    check(y, yt, dtype, name, (x,), axis=canonical)
    check(getattr(softmax, f"{name}_grad")(dy, y, axis=canonical), xt.grad, dtype, f"{name}_grad", (dy, y), axis=canonical)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_extreme_inputs(rng, log, dtype):
    """Magnitudes of 1e4 and -inf entries: no overflow, the same (finite where torch's is) result."""
    x = (rng.standard_normal((5, 8)) * 1e4).astype(dtype)
    x[0, 3] = -np.inf
    name = "log_softmax" if log else "softmax"
    y = getattr(softmax, name)(x, axis=1)
    ref = (F.log_softmax if log else F.softmax)(torch.from_numpy(x.astype(np.float64)), dim=1).numpy()
    assert y.dtype == np.dtype(dtype) and not np.isnan(y).any()
    np.testing.assert_array_equal(np.isfinite(y), np.isfinite(ref))
    assert_op_close(name, y, ref, [x], {"axis": 1})
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("x_shape, ndim, eps", [((4, 7), 1, 1e-5), ((2, 3, 5), 1, 1e-3), ((3, 4, 5), 2, 1e-5), ((2, 3, 4, 3), 2, 0.0), ((3, 5), 2, 1e-5)])
def test_layer_norm_forward_and_grad(rng, x_shape, ndim, eps, affine, dtype):
    normalized = x_shape[len(x_shape) - ndim :]
    x, dy = (rand(rng, x_shape, dtype) + 2), rand(rng, x_shape, dtype)
    weight = rand(rng, normalized, dtype) if affine != "none" else None
    bias = rand(rng, normalized, dtype) if affine == "both" else None
    xt, wt, bt = wide(x), wide(weight), wide(bias)
    yt = F.layer_norm(xt, normalized, wt, bt, eps)
    yt.backward(wide(dy, grad=False))
    attrs = {"normalized_ndim": ndim, "eps": eps}
    check(norm.layer_norm(x, weight, bias, **attrs), yt, dtype, "layer_norm", (x, weight, bias), **attrs)
    check(norm.layer_norm_grad_input(dy, x, weight, **attrs), xt.grad, dtype, "layer_norm_grad_input", (dy, x, weight), **attrs)
    if wt is not None:
        check(norm.layer_norm_grad_weight(dy, x, **attrs), wt.grad, dtype, "layer_norm_grad_weight", (dy, x), **attrs)
    if bt is not None:
        check(norm.layer_norm_grad_bias(dy, normalized_ndim=ndim), bt.grad, dtype, "layer_norm_grad_bias", (dy,), normalized_ndim=ndim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("x_shape, eps", [((2, 3, 5, 4), 1e-5), ((3, 4, 3, 3), 1e-3), ((5, 3, 1, 1), 0.1), ((1, 2, 6, 7), 1e-8)])
def test_batch_norm_train_forward_and_grad(rng, x_shape, eps, affine, dtype):
    channels = x_shape[1]
    x, dy = (rand(rng, x_shape, dtype) - 3), rand(rng, x_shape, dtype)
    weight = rand(rng, (channels,), dtype) if affine != "none" else None
    bias = rand(rng, (channels,), dtype) if affine == "both" else None
    xt, wt, bt = wide(x), wide(weight), wide(bias)
    yt = F.batch_norm(xt, None, None, wt, bt, training=True, eps=eps)
    yt.backward(wide(dy, grad=False))
    check(norm.batch_norm_train(x, weight, bias, eps=eps), yt, dtype, "batch_norm_train", (x, weight, bias), eps=eps)
    check(norm.batch_norm_train_grad_input(dy, x, weight, eps=eps), xt.grad, dtype, "batch_norm_train_grad_input", (dy, x, weight), eps=eps)
    if wt is not None:
        check(norm.batch_norm_train_grad_weight(dy, x, eps=eps), wt.grad, dtype, "batch_norm_train_grad_weight", (dy, x), eps=eps)
    if bt is not None:
        check(norm.batch_norm_train_grad_bias(dy), bt.grad, dtype, "batch_norm_train_grad_bias", (dy,))


def test_batch_norm_train_matches_a_training_module(rng):
    """The op is what torch.nn.BatchNorm2d computes in training mode (it leaves running stats alone)."""
    x = rand(rng, (4, 3, 5, 5), np.float64)
    module = torch.nn.BatchNorm2d(3).train().to(torch.float64)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(rand(rng, (3,), np.float64)))
        module.bias.copy_(torch.from_numpy(rand(rng, (3,), np.float64)))
        ref = module(torch.from_numpy(x))
    w, b = module.weight.detach().numpy(), module.bias.detach().numpy()
    check(norm.batch_norm_train(x, w, b, eps=module.eps), ref, np.float64, "batch_norm_train", (x, w, b), eps=module.eps)
