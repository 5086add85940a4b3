"""NaN and infinity through the oneDNN backend, compared with torch.nn.functional (issue 12, defect 3).

oneDNN's kernels treat NaN and infinity as they happen to fall: its relu and max pooling are maxima
that drop NaN, its empty pooling windows give -FLT_MAX, its softmax leaves a NaN row's other elements
finite, its relu gradient and fused relu multiply by 0 (NaN for an infinite operand). The backend
checks its inputs with one pass over their bits and takes an exact path where something is not
finite. Each case compares the positions of NaN, +inf and -inf exactly, and the finite values within
float32 rounding of the scale of the result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from conftest import SEED
from helpers import hardware_refusal

torch = pytest.importorskip("torch")
F = torch.nn.functional
algoswap_dnnl = pytest.importorskip("algoswap_dnnl", reason="algoswap-dnnl is not installed")

_available = algoswap.registry().backends["dnnl"].availability() if "dnnl" in algoswap.registry().backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"dnnl backend unavailable: {_available}")

NAN, INF = float("nan"), float("inf")
TOLERANCE = 2e-5  # float32 results of sums of tens of terms, relative to the result's largest finite magnitude


@pytest.fixture
def same(request: pytest.FixtureRequest) -> Any:
    """same(got, expected, what): NaN, +inf and -inf at the same positions; finite values close."""
    replay = f"replay: ALGOSWAP_TEST_SEED={SEED} .venv/bin/python -m pytest '{request.node.nodeid}'"

    def check(got: Any, expected: Any, what: str, tolerance: float = TOLERANCE) -> None:
        a = np.asarray(got, dtype=np.float64)
        b = np.asarray(expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected, dtype=np.float64)
        assert a.shape == b.shape, f"{what}: shape {a.shape}, expected {b.shape}; {replay}"
        for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
            differ = np.argwhere(test(a) != test(b))
            assert not len(differ), f"{what}: {name} differs at {differ[:5].tolist()} ({len(differ)} places); {replay}"
        finite = np.isfinite(b)
        scale = max(float(np.abs(b[finite]).max(initial=0.0)), np.finfo(np.float32).tiny)
        worst = float(np.abs(a[finite] - b[finite]).max(initial=0.0))
        assert worst <= tolerance * scale, f"{what}: finite values differ by {worst:.3g} (scale {scale:.3g}); {replay}"

    return check


def _with(rng: np.random.Generator, shape: tuple[int, ...], values: tuple[float, ...] = (NAN, INF, -INF)) -> np.ndarray:
    """A standard normal float32 array with each of ``values`` at a few random places."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    places = rng.choice(flat.size, size=min(flat.size, 2 * len(values)), replace=False)
    for i, place in enumerate(places):
        flat[place] = values[i % len(values)]
    return x


def _channels_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _bfloat16(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16)


# ---------------------------------------------------------------- activations


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_relu_keeps_nan(dtype: str, same: Any) -> None:
    if refusal := hardware_refusal("dnnl", dtype):
        pytest.skip(refusal)
    x = np.array([NAN, -1.0, 1.0, INF, -INF, 0.0, -3.0, 2.0] * 3, np.float32)
    given = _bfloat16(x) if dtype == "bfloat16" else x
    got = algoswap.ops.relu(given, algorithm="dnnl:direct").astype(np.float32)
    same(got, F.relu(torch.tensor(x)), "relu")


def test_relu_keeps_nan_in_channels_last_memory(rng: np.random.Generator, same: Any) -> None:
    x = _with(rng, (2, 5, 4, 3))
    same(algoswap.ops.relu(_channels_last(x), algorithm="dnnl:direct"), F.relu(torch.tensor(x)), "relu (channels-last)")


def test_relu_grad_is_zero_where_the_input_is_not_positive(same: Any) -> None:
    x = torch.tensor([-1.0, 2.0, NAN, -INF, INF, -1.0, -1.0, 0.0, 2.0], requires_grad=True)
    dy = torch.tensor([NAN, 1.0, 1.0, 1.0, 1.0, INF, -INF, NAN, INF])
    F.relu(x).backward(dy)
    same(algoswap.ops.call("relu_grad", dy.numpy(), x.detach().numpy(), algorithm="dnnl:direct"), x.grad, "relu_grad")


def test_leaky_relu_and_its_gradient(rng: np.random.Generator, same: Any) -> None:
    x = torch.tensor(_with(rng, (40,)), requires_grad=True)
    dy = torch.tensor(_with(rng, (40,)))
    y = F.leaky_relu(x, 0.1)
    y.backward(dy)
    same(algoswap.ops.call("leaky_relu", x.detach().numpy(), negative_slope=0.1, algorithm="dnnl:direct"), y, "leaky_relu")
    same(algoswap.ops.call("leaky_relu_grad", dy.numpy(), x.detach().numpy(), negative_slope=0.1, algorithm="dnnl:direct"),
         x.grad, "leaky_relu_grad")


@pytest.mark.parametrize("exponent", [2.0, -1.0, 0.5, 1.0])  # oneDNN's fast ones: the others are refused
def test_pow_scalar_grad_at_infinity(exponent: float, same: Any) -> None:
    x = torch.tensor([INF, -INF, 2.0, NAN, 0.5, INF], requires_grad=True)
    dy = torch.tensor([1.0, 1.0, INF, 1.0, 0.0, -2.0])
    (x ** exponent).backward(dy)
    got = algoswap.ops.call("pow_scalar_grad", dy.numpy(), x.detach().numpy(), exponent=exponent, algorithm="dnnl:direct")
    same(got, x.grad, f"pow_scalar_grad exponent {exponent}")


# ---------------------------------------------------------------- pooling

MAX_POOLS = [
    ((2, 3, 9, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 2, 7, 7), {"kernel_size": 2, "ceil_mode": True}),
    ((1, 2, 11, 10), {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True}),
    ((1, 3, 2, 7), {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1, "dilation": (3, 1), "ceil_mode": True}),
]
DENSE_POOLS = MAX_POOLS[:2]  # bfloat16: oneDNN has only its reference kernel for dilated windows here


def _pool_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"stride": attrs["kernel_size"], "padding": 0, "dilation": 1, "ceil_mode": False, **attrs}


@pytest.mark.parametrize("shape, attrs, layout", [(*case, layout) for layout in ("nchw", "channels_last")
                                                  for case in MAX_POOLS] + [(*case, "bfloat16") for case in DENSE_POOLS])
def test_maxpool2d_keeps_nan_and_infinity(shape: tuple[int, ...], attrs: dict[str, Any], layout: str,
                                          rng: np.random.Generator, same: Any) -> None:
    if layout == "bfloat16" and (refusal := hardware_refusal("dnnl", "bfloat16")):
        pytest.skip(refusal)
    x = _with(rng, shape, (NAN, INF, -INF, -INF))
    x[0, 0, :2, :2] = -INF  # a window of -inf only: -inf, not -FLT_MAX
    given = {"nchw": x, "channels_last": _channels_last(x), "bfloat16": _bfloat16(x)}[layout]
    expected = F.max_pool2d(torch.tensor(given.astype(np.float32)), **attrs)
    got = algoswap.ops.maxpool2d(given, **_pool_attrs(attrs), algorithm="dnnl:direct")
    same(got.astype(np.float32), expected, f"maxpool2d {layout}", tolerance=0)


def test_maxpool2d_windows_wholly_in_the_padding_give_minus_infinity(rng: np.random.Generator, same: Any) -> None:
    """Issue 12: oneDNN gave -3.4e38 (its initial maximum) for such windows, even with a finite input."""
    shape, attrs = MAX_POOLS[3]
    x = rng.standard_normal(shape).astype(np.float32)
    expected = F.max_pool2d(torch.tensor(x), **attrs)
    assert torch.isneginf(expected).any()  # the case has such windows
    for given in (x, _channels_last(x)):
        same(algoswap.ops.maxpool2d(given, **_pool_attrs(attrs), algorithm="dnnl:direct"), expected, "maxpool2d", tolerance=0)


@pytest.mark.parametrize("shape, attrs", MAX_POOLS[:3])  # torch aborts on the gradient of an empty window
def test_maxpool2d_grad_goes_where_torch_sends_it(shape: tuple[int, ...], attrs: dict[str, Any],
                                                   rng: np.random.Generator, same: Any) -> None:
    x = torch.tensor(_with(rng, shape, (NAN, NAN, INF, -INF)), requires_grad=True)  # two NaN: the last one wins
    y = F.max_pool2d(x, **attrs)
    dy = torch.tensor(rng.standard_normal(tuple(y.shape)).astype(np.float32))
    y.backward(dy)
    got = algoswap.ops.call("maxpool2d_grad", dy.numpy(), x.detach().numpy(), **_pool_attrs(attrs), algorithm="dnnl:direct")
    same(got, x.grad, "maxpool2d_grad")


def test_maxpool2d_grad_of_windows_wholly_in_the_padding_goes_nowhere(rng: np.random.Generator, same: Any) -> None:
    """torch aborts here (its index of an empty window is out of range); the reference sends nothing."""
    shape, attrs = MAX_POOLS[3]
    x = rng.standard_normal(shape).astype(np.float32)
    y = algoswap.ops.maxpool2d(x, **_pool_attrs(attrs), algorithm="dnnl:direct")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    got, expected = (algoswap.ops.call("maxpool2d_grad", dy, x, **_pool_attrs(attrs), algorithm=name)
                     for name in ("dnnl:direct", "numpy:direct"))
    same(got, expected, "maxpool2d_grad")


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avgpool2d_and_its_gradient(count_include_pad: bool, rng: np.random.Generator, same: Any) -> None:
    attrs = {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": count_include_pad}
    x = torch.tensor(_with(rng, (2, 3, 9, 9)), requires_grad=True)
    y = F.avg_pool2d(x, **attrs)
    dy = torch.tensor(_with(rng, tuple(y.shape)))
    y.backward(dy)
    same(algoswap.ops.avgpool2d(x.detach().numpy(), **attrs, algorithm="dnnl:direct"), y, "avgpool2d")
    got = algoswap.ops.call("avgpool2d_grad", dy.numpy(), input_size=(2, 3, 9, 9), **attrs, algorithm="dnnl:direct")
    same(got, x.grad, "avgpool2d_grad")


def test_adaptiveavgpool2d(rng: np.random.Generator, same: Any) -> None:
    x = _with(rng, (2, 3, 9, 6))
    same(algoswap.ops.call("adaptiveavgpool2d", x, output_size=(3, 2), algorithm="dnnl:direct"),
         F.adaptive_avg_pool2d(torch.tensor(x), (3, 2)), "adaptiveavgpool2d")


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_with_nan_or_infinity(axis: int, log: bool, rng: np.random.Generator, same: Any) -> None:
    """A row with a NaN or +inf, or only -inf, is NaN throughout (torch); -inf elements of other rows give 0."""
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x[0, 0, 0], x[1, 2, 3] = NAN, INF
    x[2, :, 4], x[3, 1, :], x[:, 3, 2] = -INF, -INF, -INF
    op, function = ("log_softmax", F.log_softmax) if log else ("softmax", F.softmax)
    same(algoswap.ops.call(op, x, axis=axis, algorithm="dnnl:direct"), function(torch.tensor(x), axis), op)


def test_softmax_of_the_issue(same: Any) -> None:
    x = np.array([[NAN, 1.0, 2.0]], np.float32)
    same(algoswap.ops.softmax(x, axis=-1), F.softmax(torch.tensor(x), -1), "softmax (default implementation)")


@pytest.mark.parametrize("log", [False, True])
def test_softmax_gradients(log: bool, rng: np.random.Generator, same: Any) -> None:
    x = torch.tensor(rng.standard_normal((3, 7)).astype(np.float32))
    y = F.log_softmax(x, -1) if log else F.softmax(x, -1)
    y[0, 2], y[1, 1] = NAN, (-INF if log else 0.0)
    dy = torch.tensor(rng.standard_normal((3, 7)).astype(np.float32))
    dy[2, 3] = INF
    backward = torch._log_softmax_backward_data if log else torch._softmax_backward_data
    op = "log_softmax_grad" if log else "softmax_grad"
    same(algoswap.ops.call(op, dy.numpy(), y.numpy(), axis=-1, algorithm="dnnl:direct"),
         backward(dy, y, 1, torch.float32), op)


# ---------------------------------------------------------------- normalisation


def test_batch_norms_with_infinite_parameters_follow_torchs_folded_form(rng: np.random.Generator, same: Any) -> None:
    """torch computes x * alpha + beta (alpha = weight / sqrt(var + eps), beta = bias - mean * alpha): an
    infinite weight meets the mean as inf - inf = NaN where oneDNN's (x - mean) * alpha + bias gives ±inf."""
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2.0, 3).astype(np.float32)
    weight, bias = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    weight[1], bias[2], var[0] = INF, -INF, INF
    t = torch.tensor
    same(algoswap.ops.call("batchnorm2d", x, mean, var, weight, bias, eps=1e-5, algorithm="dnnl:direct"),
         F.batch_norm(t(x), t(mean), t(var), t(weight), t(bias), False, 0.0, 1e-5), "batchnorm2d")
    same(algoswap.ops.call("batch_norm_train", x, weight, bias, eps=1e-5, algorithm="dnnl:direct"),
         F.batch_norm(t(x), None, None, t(weight), t(bias), True, 0.0, 1e-5), "batch_norm_train")
    same(algoswap.ops.call("instance_norm", x, weight, bias, eps=1e-5, algorithm="dnnl:direct"),
         F.instance_norm(t(x), weight=t(weight), bias=t(bias), eps=1e-5), "instance_norm")
    same(algoswap.ops.call("group_norm", x, weight, bias, num_groups=1, eps=1e-5, algorithm="dnnl:direct"),
         F.group_norm(t(x), 1, weight=t(weight), bias=t(bias), eps=1e-5), "group_norm")


# ---------------------------------------------------------------- convolution


@pytest.mark.parametrize("algorithm", ["dnnl:direct", "dnnl:auto"])
def test_conv2d_fused_relu_keeps_nan_and_gives_positive_zeros(algorithm: str, rng: np.random.Generator,
                                                             same: Any) -> None:
    """The relu post-op dropped NaN (jit kernels) or made NaN of -inf (gemm and reference kernels)."""
    x, w = _with(rng, (2, 3, 9, 11)), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b, residual = rng.standard_normal(4).astype(np.float32), rng.standard_normal((2, 4, 9, 11)).astype(np.float32)
    expected = F.relu(F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1) + torch.tensor(residual))
    for given, res in ((x, residual), (_channels_last(x), _channels_last(residual))):
        got = algoswap.ops.call("conv2d_fused", given, w, b, res, padding=1, activation="relu", algorithm=algorithm)
        same(got, expected, "conv2d_fused")
        assert not np.signbit(got[got == 0]).any(), "relu gave -0"


@pytest.mark.parametrize("algorithm", ["dnnl:direct", "dnnl:auto"])
@pytest.mark.parametrize("case", ["finite", "nan input", "inf weight", "inf bias", "nan residual"])
@pytest.mark.parametrize("activation", ["relu", "relu6", "gelu"])
def test_conv2d_fused_activations_on_large_outputs(algorithm: str, case: str, activation: str, rng: np.random.Generator,
                                                   same: Any) -> None:
    """Where the output has conv.FINITE_RELU_FROM elements or more, a fused relu runs a NaN-dropping clip
    post-op when the sums cannot be NaN (finite inputs, no overflow possible), the NaN-keeping one otherwise;
    relu6 and gelu run oneDNN's clip_v2 and gelu_erf post-ops then, and after the convolution otherwise."""
    from algoswap_dnnl import conv

    from torch_oracle import FORWARD

    x = rng.standard_normal((1, 2, 130, 130)).astype(np.float32)  # 8 x 130 x 130 = 135,200 outputs
    w, b = rng.standard_normal((8, 2, 3, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    residual = rng.standard_normal((1, 8, 130, 130)).astype(np.float32)
    assert 8 * 130 * 130 >= conv.FINITE_RELU_FROM
    place = tuple(int(i) for i in rng.integers(1, 129, 2))
    if case == "nan input":
        x[(0, 1, *place)] = NAN
    elif case == "inf weight":
        w[5, 1, 1, 1] = INF
    elif case == "inf bias":
        b[3] = -INF
    elif case == "nan residual":
        residual[(0, 6, *place)] = NAN
    wide = {name: torch.tensor(a, dtype=torch.float64) for name, a in (("x", x), ("w", w), ("b", b), ("r", residual))}
    op, attrs = algoswap.FUSED_ACTIVATIONS[activation]
    expected = FORWARD[op](F.conv2d(wide["x"], wide["w"], wide["b"], padding=1) + wide["r"], **attrs)
    frozen_w, frozen_b = algoswap.freeze(w.copy()), algoswap.freeze(b.copy())
    for weight, bias in ((w, b), (frozen_w, frozen_b)):
        got = algoswap.ops.call("conv2d_fused", x, weight, bias, residual, padding=1, activation=activation, algorithm=algorithm)
        same(got, expected, f"conv2d_fused, {activation}, {case}, {'frozen' if weight is frozen_w else 'plain'} weights")
        if activation == "relu":
            assert not np.signbit(got[got == 0]).any(), "relu gave -0"
    chosen = conv._post_op(activation, 8 * 130 * 130, x, w, b, residual)
    assert chosen == (f"{activation}_finite" if case == "finite" else "relu" if activation == "relu" else None), chosen


def test_fused_activations_keep_exact_paths_where_sums_could_overflow(rng: np.random.Generator) -> None:
    """Finite inputs whose products can overflow (inf - inf = NaN in some sum) take the NaN-keeping relu, and
    relu6 and gelu after the convolution; gelu does from half the largest float32 on (oneDNN's gelu_erf
    overflows from 1.7e38 on)."""
    from algoswap_dnnl import conv

    x = rng.standard_normal((1, 2, 130, 130)).astype(np.float32)
    w = np.ones((8, 2, 3, 3), np.float32)  # 18 terms, max|w| = 1
    post_ops = {activation: conv._post_op(activation, 8 * 130 * 130, x, w, None, None) for activation in ("relu", "relu6", "gelu")}
    assert post_ops == {"relu": "relu_finite", "relu6": "relu6_finite", "gelu": "gelu_finite"}
    x[0, 0, 0, 0] = 1.5e38 / 18  # every sum below 1.5e38: not 1.7e38
    assert conv._post_op("gelu", 8 * 130 * 130, x, w, None, None) == "gelu_finite"
    x[0, 0, 0, 0] = 1e37  # sums up to 1.8e38
    post_ops = {activation: conv._post_op(activation, 8 * 130 * 130, x, w, None, None) for activation in ("relu", "relu6", "gelu")}
    assert post_ops == {"relu": "relu_finite", "relu6": "relu6_finite", "gelu": None}
    x[0, 0, 0, 0] = 1e38  # sums up to 1.8e39, beyond float32's 3.4e38
    post_ops = {activation: conv._post_op(activation, 8 * 130 * 130, x, w, None, None) for activation in ("relu", "relu6", "gelu")}
    assert post_ops == {"relu": "relu", "relu6": None, "gelu": None}
    x[0, 0, 0, 0] = 0.0  # finite sums again, but a small output: relu keeps its exact post-ops
    assert conv._post_op("relu", conv.FINITE_RELU_FROM - 1, x, w, None, None) == "relu"
    assert conv._post_op("relu6", conv.FINITE_RELU_FROM - 1, x, w, None, None) == "relu6_finite"
    assert {conv._post_op(a, 16, x, w, None, None) for a in ("silu", "hardswish", "none")} == {"silu", "hardswish", "none"}


@pytest.mark.parametrize("algorithm", ["dnnl:direct", "dnnl:auto"])
@pytest.mark.parametrize("frozen", [False, True])
def test_conv2d_nonfinite_weights_meet_the_zero_padding(algorithm: str, frozen: bool, rng: np.random.Generator,
                                                        same: Any) -> None:
    """Zero padding multiplies the weights too (NaN * 0 is NaN): oneDNN's kernels skip those taps. torch
    itself does either, by the kernel it picks (a NaN weight NaNs the whole channel at batch 1, not at
    batch 2), so the definition (convolving the zero-padded input) is the reference."""
    x, w = rng.standard_normal((2, 3, 9, 11)).astype(np.float32), _with(rng, (4, 3, 3, 3))
    b = rng.standard_normal(4).astype(np.float32)
    expected = F.conv2d(F.pad(torch.tensor(x), (2, 2, 1, 1)), torch.tensor(w), torch.tensor(b))
    got = algoswap.ops.conv2d(x, algoswap.freeze(w) if frozen else w, b, padding=(1, 2), algorithm=algorithm)
    same(got, expected, "conv2d")


@pytest.mark.parametrize("algorithm", ["dnnl:direct", "dnnl:auto"])
def test_bfloat16_conv2d_with_nonfinite_weights_and_inputs(algorithm: str, rng: np.random.Generator, same: Any,
                                                           request: pytest.FixtureRequest) -> None:
    """oneDNN's bfloat16 kernels multiply channel pairs padded with zeros: an infinity met a 0 there (NaN)."""
    if refusal := hardware_refusal("dnnl", "bfloat16"):
        pytest.skip(refusal)
    import algoswap_dnnl

    algoswap_dnnl.set_layout("nhwc")  # a kernel that pairs channels (auto picks one by timing)
    request.addfinalizer(lambda: algoswap_dnnl.set_layout(None))
    x, w = rng.standard_normal((2, 5, 9, 7)).astype(np.float32), rng.standard_normal((4, 5, 1, 1)).astype(np.float32)
    w[3, 4, 0, 0] = INF  # the odd last input channel: paired with a padding zero
    x, w = _bfloat16(x), _bfloat16(w)
    expected = F.conv2d(torch.tensor(x.astype(np.float32)), torch.tensor(w.astype(np.float32)), stride=3)
    got = algoswap.ops.conv2d(_channels_last(x), w, None, stride=3, algorithm=algorithm)
    assert got.dtype == x.dtype
    same(got.astype(np.float32), expected, "conv2d bfloat16", tolerance=1e-2)  # rounded to bfloat16 (8 bits)


def test_conv2d_nonfinite_inputs(rng: np.random.Generator, same: Any) -> None:
    x, w = _with(rng, (1, 4, 8, 8)), rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    expected = F.conv2d(torch.tensor(x), torch.tensor(w), padding=1, stride=2, groups=2)
    same(algoswap.ops.conv2d(x, w, None, padding=1, stride=2, groups=2, algorithm="dnnl:direct"), expected, "conv2d")


def test_conv2d_grad_weight_with_nonfinite_grad_output(rng: np.random.Generator, same: Any) -> None:
    x = torch.tensor(rng.standard_normal((1, 2, 8, 7)).astype(np.float32))
    w = torch.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), requires_grad=True)
    y = F.conv2d(F.pad(x, (2, 1, 1, 0)), w)  # the definition: the padding's zeros are multiplied too
    dy = torch.tensor(_with(rng, tuple(y.shape)))
    y.backward(dy)
    got = algoswap.ops.call("conv2d_grad_weight", dy.numpy(), x.numpy(), weight_size=(3, 2, 3, 3),
                            padding=((1, 0), (2, 1)), algorithm="dnnl:direct")
    same(got, w.grad, "conv2d_grad_weight")


def test_conv2d_grad_input_with_nonfinite_grad_output(rng: np.random.Generator, same: Any) -> None:
    x = torch.tensor(rng.standard_normal((2, 3, 9, 11)).astype(np.float32), requires_grad=True)
    w = torch.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = F.conv2d(x, w, padding=1, stride=2)
    dy = torch.tensor(_with(rng, tuple(y.shape)))
    y.backward(dy)
    got = algoswap.ops.call("conv2d_grad_input", dy.numpy(), w.numpy(), input_size=(2, 3, 9, 11), padding=1, stride=2,
                            algorithm="dnnl:direct")
    same(got, x.grad, "conv2d_grad_input")


def test_a_nan_pixel_reaches_the_logits_of_a_swapped_model(rng: np.random.Generator, same: Any) -> None:
    """Issue 12: conv-relu-maxpool-linear gave torch NaN logits and algoswap finite ones."""
    torch.manual_seed(int(rng.integers(2**31)))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5)).eval()
    x = torch.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    x[0, 1, 3, 4] = NAN
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape))
    with torch.no_grad():
        expected, got = model(x), converted(x)
    assert torch.isnan(expected[0]).all() and not torch.isnan(expected[1]).any()
    same(got, expected, "logits")
