"""Compare the NumPy reference kernels of add, concat, reshape and batchnorm2d with PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from algoswap_numpy import elementwise, norm, shape  # noqa: E402
from helpers import relative_error  # noqa: E402

DTYPES = [np.float32, np.float64]
TOL = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-12}


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape)).astype(dtype)


def check(out: np.ndarray, ref: "torch.Tensor", dtype: type) -> None:
    expected = ref.detach().numpy()
    assert out.dtype == np.dtype(dtype) and out.shape == expected.shape
    assert relative_error(out, expected) <= TOL[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ()), ((), (2, 2)), ((1, 3, 1, 2), (4, 1, 5, 1)),
])
def test_add(rng, a_shape, b_shape, dtype):
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    check(elementwise.add(a, b), torch.from_numpy(a) + torch.from_numpy(b), dtype)


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
    check(norm.batchnorm2d(x, mean, var, weight, bias, eps=eps), ref, dtype)
    wide = [None if a is None else torch.from_numpy(a.astype(np.float64)) for a in (mean, var, weight, bias)]
    functional = F.batch_norm(torch.from_numpy(x.astype(np.float64)), *wide[:2], *wide[2:], training=False, eps=eps)
    check(norm.batchnorm2d(x, mean, var, weight, bias, eps=eps), functional, dtype)
