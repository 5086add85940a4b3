"""Compare the pure-NumPy reference kernels with torch.nn.functional and autograd."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from algoswap_numpy import _padding, activation, conv, linear, pool, shape  # noqa: E402
from helpers import assert_close  # noqa: E402
from algoswap.testing._scales import sum_scale  # noqa: E402
from helpers import check  # noqa: E402

DTYPES = [np.float32, np.float64]
MODES = ["zeros", "reflect", "replicate", "circular"]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def tt(a: np.ndarray, grad: bool = False) -> "torch.Tensor":
    """float64 torch tensor holding exactly the values of a."""
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


# ----------------------------------------------------------------------------- padding

PAD_CASES = [((1, 2), (3, 0)), ((0, 0), (2, 2)), ((3, 1), (1, 4)), ((0, 0), (0, 0))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PAD_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_padding_and_adjoint(rng, mode, padding, dtype):
    x = rand(rng, (2, 3, 5, 6), dtype)
    (pt, pb), (pl, pr) = padding
    xt = tt(x, grad=True)
    ref = F.pad(xt, (pl, pr, pt, pb), mode="constant" if mode == "zeros" else mode)
    out = _padding.pad_hw(x, padding, mode)
    check(out, ref, dtype)
    g = rand(rng, out.shape, dtype)
    ref.backward(tt(g))
    fold = lambda a: _padding.unpad_hw_grad(a, (5, 6), padding, mode)  # noqa: E731
    scale, length = sum_scale(fold, [g])
    assert_close(fold(g), xt.grad, reduction_length=length, scale=scale, context=f"unpad {mode} {padding}")


# ----------------------------------------------------------------------------- conv

# (x shape, w shape, stride, padding, dilation, groups)
CONV_CASES = [
    ((2, 4, 9, 11), (6, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((2, 4, 7, 10), (6, 2, 3, 3), (1, 1), ((0, 1), (2, 0)), (1, 1), 2),
    ((2, 6, 8, 5), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 6),
    ((1, 4, 6, 7), (8, 1, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 4),
    ((2, 3, 10, 7), (5, 3, 2, 4), (2, 3), ((0, 2), (1, 3)), (1, 1), 1),
    ((1, 4, 13, 12), (4, 2, 3, 2), (1, 2), ((2, 1), (0, 2)), (2, 3), 2),
    ((2, 6, 11, 9), (6, 1, 3, 3), (2, 2), ((1, 1), (1, 1)), (2, 1), 6),
    ((2, 5, 9, 8), (3, 5, 1, 1), (2, 3), ((0, 0), (0, 0)), (1, 1), 1),
    ((1, 2, 5, 4), (3, 2, 5, 4), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
    ((1, 3, 6, 9), (2, 3, 5, 5), (3, 2), ((2, 2), (2, 2)), (1, 2), 1),
]
ALGOS = ["direct", "smm", "winograd", "fft"]


def torch_conv(x, w, b, stride, padding, dilation, groups, mode):
    (pt, pb), (pl, pr) = padding
    xp = F.pad(x, (pl, pr, pt, pb), mode="constant" if mode == "zeros" else mode)
    return F.conv2d(xp, w, b, stride=stride, dilation=dilation, groups=groups)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"c{i}" for i in range(len(CONV_CASES))])
def test_conv2d(rng, case, mode, dtype):
    x_shape, w_shape, stride, padding, dilation, groups = case
    x, w, b = rand(rng, x_shape, dtype), rand(rng, w_shape, dtype), rand(rng, w_shape[:1], dtype)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                 padding_mode=mode)
    xt, wt, bt = tt(x, True), tt(w, True), tt(b, True)
    ref = torch_conv(xt, wt, bt, stride, padding, dilation, groups, mode)
    for algo in ALGOS:
        if algo == "winograd" and conv.winograd_applies(w_shape[2:], stride, dilation) is not True:
            continue
        out = getattr(conv, f"conv2d_{algo}")(x, w, b, **attrs)
        check(out, ref, dtype, "conv2d", (x, w, b), **attrs)
    check(conv.conv2d_direct(x, w, None, **attrs), ref - bt.reshape(-1, 1, 1), dtype, "conv2d", (x, w, None), **attrs)

    dy = rand(rng, tuple(ref.shape), dtype)
    ref.backward(tt(dy))
    check(conv.conv2d_grad_input(dy, w, input_size=x.shape, **attrs), xt.grad, dtype, "conv2d_grad_input", (dy, w),
          input_size=x.shape, **attrs)
    check(conv.conv2d_grad_weight(dy, x, weight_size=w.shape, **attrs), wt.grad, dtype, "conv2d_grad_weight", (dy, x),
          weight_size=w.shape, **attrs)
    check(conv.conv2d_grad_bias(dy), bt.grad, dtype, "conv2d_grad_bias", (dy,))


def test_winograd_applies():
    assert conv.winograd_applies((3, 3), (1, 1), (1, 1)) is True
    reason = conv.winograd_applies((5, 5), (1, 1), (1, 1))
    assert reason == ("winograd F(2x2,3x3) needs a 3x3 kernel, stride 1 and dilation 1; "
                      "got kernel (5, 5), stride (1, 1), dilation (1, 1)")
    assert isinstance(conv.winograd_applies((3, 3), (2, 1), (1, 1)), str)
    assert isinstance(conv.winograd_applies((3, 3), (1, 1), (1, 2)), str)


# ----------------------------------------------------------------------------- linear

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape", [(5,), (3, 5), (2, 4, 5), (2, 1, 3, 5)])
def test_linear(rng, x_shape, bias, dtype):
    x, w = rand(rng, x_shape, dtype), rand(rng, (7, 5), dtype)
    b = rand(rng, (7,), dtype) if bias else None
    xt, wt = tt(x, True), tt(w, True)
    bt = tt(b, True) if bias else None
    ref = F.linear(xt, wt, bt)
    check(linear.linear(x, w, b), ref, dtype, "linear", (x, w, b))
    dy = rand(rng, tuple(ref.shape), dtype)
    ref.backward(tt(dy))
    check(linear.linear_grad_input(dy, w), xt.grad, dtype, "linear_grad_input", (dy, w))
    check(linear.linear_grad_weight(dy, x), wt.grad, dtype, "linear_grad_weight", (dy, x))
    if bias:
        check(linear.linear_grad_bias(dy), bt.grad, dtype, "linear_grad_bias", (dy,))


# ----------------------------------------------------------------------------- pooling

# (x shape, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [
    ((2, 3, 9, 11), (3, 2), (2, 1), (1, 1), (1, 1), False),
    ((2, 3, 9, 11), (3, 2), (2, 1), (1, 1), (1, 1), True),
    ((1, 2, 10, 7), (3, 3), (2, 2), (1, 0), (2, 1), True),
    ((2, 2, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 3, 7, 12), (4, 3), (3, 2), (2, 1), (1, 2), True),
    ((1, 2, 11, 9), (2, 3), (3, 4), (1, 1), (1, 1), True),
    ((1, 1, 5, 6), (5, 6), (1, 1), (0, 0), (1, 1), False),
    ((2, 2, 6, 13), (3, 5), (1, 3), (1, 2), (2, 1), False),
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MAX_CASES, ids=[f"m{i}" for i in range(len(MAX_CASES))])
def test_maxpool2d(rng, case, dtype, ties):
    x_shape, k, s, p, d, ceil = case
    x = rng.integers(0, 3, x_shape).astype(dtype) if ties else rand(rng, x_shape, dtype)
    attrs = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
    xt = tt(x, True)
    ref = F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil)
    check(pool.maxpool2d(x, **attrs), ref, dtype)
    dy = rand(rng, tuple(ref.shape), dtype)
    ref.backward(tt(dy))
    check(pool.maxpool2d_grad(dy, x, **attrs), xt.grad, dtype, "maxpool2d_grad", (dy, x), **attrs)


# (x shape, kernel, stride, padding, ceil_mode)
AVG_CASES = [
    ((2, 3, 9, 11), (3, 2), (2, 1), (1, 1), False),
    ((2, 3, 9, 11), (3, 2), (2, 1), (1, 1), True),
    ((1, 2, 10, 7), (3, 3), (2, 2), (1, 0), True),
    ((1, 3, 7, 12), (4, 3), (3, 2), (2, 1), True),
    ((1, 2, 11, 9), (2, 3), (3, 4), (1, 1), True),
    ((2, 2, 8, 8), (2, 2), (2, 2), (0, 0), False),
    ((1, 1, 5, 6), (5, 6), (1, 1), (0, 0), False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("divisor", [None, 5])
@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("case", AVG_CASES, ids=[f"a{i}" for i in range(len(AVG_CASES))])
def test_avgpool2d(rng, case, include_pad, divisor, dtype):
    x_shape, k, s, p, ceil = case
    x = rand(rng, x_shape, dtype)
    attrs = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
                 count_include_pad=include_pad, divisor_override=divisor)
    xt = tt(x, True)
    ref = F.avg_pool2d(xt, k, s, p, ceil_mode=ceil, count_include_pad=include_pad,
                       divisor_override=divisor)
    check(pool.avgpool2d(x, **attrs), ref, dtype, "avgpool2d", (x,), **attrs)
    dy = rand(rng, tuple(ref.shape), dtype)
    ref.backward(tt(dy))
    check(pool.avgpool2d_grad(dy, input_size=x.shape, **attrs), xt.grad, dtype, "avgpool2d_grad", (dy,),
          input_size=x.shape, **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape, out_size", [
    ((2, 3, 7, 10), (3, 4)), ((1, 2, 5, 5), (7, 3)), ((1, 1, 6, 9), (1, 1)),
    ((2, 2, 8, 8), (8, 8)), ((1, 2, 13, 1), (5, 2)), ((1, 2, 9, 14), (4, 6)),
])
def test_adaptiveavgpool2d(rng, x_shape, out_size, dtype):
    x = rand(rng, x_shape, dtype)
    xt = tt(x, True)
    ref = F.adaptive_avg_pool2d(xt, out_size)
    check(pool.adaptiveavgpool2d(x, output_size=out_size), ref, dtype, "adaptiveavgpool2d", (x,), output_size=out_size)
    dy = rand(rng, tuple(ref.shape), dtype)
    ref.backward(tt(dy))
    check(pool.adaptiveavgpool2d_grad(dy, input_size=x.shape), xt.grad, dtype, "adaptiveavgpool2d_grad", (dy,),
          input_size=x.shape)


@pytest.mark.parametrize("args", [
    (9, 3, 2, 1, 1, False), (9, 3, 2, 1, 1, True), (10, 3, 3, 1, 2, True),
    (7, 2, 3, 1, 1, True), (5, 5, 1, 0, 1, False), (6, 4, 3, 2, 1, True),
])
def test_pool_output_size(args):
    in_size, k, s, p, d, ceil = args
    ref = F.max_pool1d(torch.zeros(1, 1, in_size), k, s, p, d, ceil_mode=ceil).shape[-1]
    assert pool.pool_output_size(*args) == ref


@pytest.mark.parametrize("args", [(9, 3, 2, 1, 1, 1), (10, 3, 3, 0, 2, 2), (7, 1, 1, 0, 0, 1), (8, 5, 2, 3, 1, 2), (5, 5, 1, 0, 0, 1)])
def test_conv_output_size(args):
    """algoswap.conv_output_size, which the spec and the backends share, is torch's conv1d output size."""
    import algoswap

    size, k, s, before, after, d = args
    x = F.pad(torch.zeros(1, 1, size), (before, after))
    assert algoswap.conv_output_size(*args) == F.conv1d(x, torch.zeros(1, 1, k), stride=s, dilation=d).shape[-1]


# ----------------------------------------------------------------------------- misc

@pytest.mark.parametrize("dtype", DTYPES)
def test_relu(rng, dtype):
    x = rand(rng, (3, 4, 5, 7), dtype)
    x[0, 0, 0, :3] = 0.0
    xt = tt(x, True)
    ref = F.relu(xt)
    check(activation.relu(x), ref, dtype)
    dy = rand(rng, x.shape, dtype)
    ref.backward(tt(dy))
    check(activation.relu_grad(dy, x), xt.grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape, start, end", [
    ((2, 3, 4, 5), 1, 3), ((2, 3, 4, 5), 0, 3), ((2, 3, 4, 5), 2, 2),
    ((2, 3, 4, 5), 0, 0), ((7,), 0, 0), ((2, 0, 3), 1, 2), ((3, 4), 0, 1),
])
def test_flatten(rng, x_shape, start, end, dtype):
    x = rand(rng, x_shape, dtype)
    out = shape.flatten(x, start_dim=start, end_dim=end)
    ref = torch.flatten(tt(x), start, end)
    assert out.shape == tuple(ref.shape)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, ref.numpy())
