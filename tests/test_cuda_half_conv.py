"""The CUDA backend's convolutions and matrix products in half precision (float16, bfloat16), its NHWC
convolutions, its fused cuDNN graphs and its TF32 rule. GPU only (benchmarks/cuda_device_run.sh); without a
GPU every test here is skipped with the backend's reason.

Each result is compared with the NumPy reference computed in float64 on the same (rounded) inputs, under
the tolerance policy (tests/helpers.py): a half-precision result rounds once to its format and accumulates
in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import assert_close, assert_op_close, derived_seed

pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
ml_dtypes = pytest.importorskip("ml_dtypes")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
HALF = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
CONV = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1, "padding_mode": "zeros"}


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(derived_seed(*keys))


def _rounded(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any], scale: float = 1.0) -> np.ndarray:
    """Random values already representable in ``dtype`` (as float64), so the reference sees the inputs the GPU does."""
    return (rng.standard_normal(shape) * scale).astype(dtype).astype(np.float64)


def _reference_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    return np.asarray(algoswap.ops.call("conv2d", x, w, b, algorithm="numpy:smm", padding=1))


def _activation(name: str, v: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return {"none": lambda: v, "relu": lambda: np.where(v > 0, v, np.where(np.isnan(v), v, 0.0)),
            "relu6": lambda: np.clip(v, 0, 6), "silu": lambda: v / (1 + np.exp(-v)),
            "gelu": lambda: 0.5 * v * (1 + erf(v / np.sqrt(2))),
            "hardswish": lambda: v * np.clip(v + 3, 0, 6) / 6}[name]()


def _cp() -> Any:
    import cupy

    return cupy


def _nhwc(array: Any) -> Any:
    cp = _cp()
    return cp.ascontiguousarray(cp.asarray(array).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("algorithm", ["guess", "find"])
def test_half_precision_convolutions_match_the_float64_reference(dtype: str, algorithm: str) -> None:
    rng = _rng(len(dtype), len(algorithm))
    x, w = _rounded(rng, (4, 32, 14, 14), HALF[dtype]), _rounded(rng, (48, 32, 3, 3), HALF[dtype], 0.1)
    out = algoswap.ops.call("conv2d", x.astype(HALF[dtype]), w.astype(HALF[dtype]), None, algorithm=f"cuda:{algorithm}",
                            transfer=True, padding=1)
    assert out.dtype == HALF[dtype]
    assert_op_close("conv2d", out, _reference_conv(x, w), [x, w, None], {"padding": 1},
                    context=f"cuda:{algorithm} {dtype}")
    selection = algoswap.select("conv2d", [x.shape, w.shape, None], dtype=dtype, algorithm=f"cuda:{algorithm}", memory="cuda", padding=1)
    assert f"{dtype}, NHWC" in selection.kernel, selection.kernel


@pytest.mark.parametrize("dtype", ["float32", *sorted(HALF)])
def test_a_channels_last_input_gives_a_channels_last_output(dtype: str) -> None:
    from algoswap_cuda import conv

    cp, numpy_dtype = _cp(), np.dtype(dtype) if dtype == "float32" else HALF[dtype]
    rng = _rng(7, len(dtype))
    x, w = _rounded(rng, (2, 16, 9, 9), numpy_dtype), _rounded(rng, (8, 16, 3, 3), numpy_dtype, 0.2)
    y = conv.conv2d_guess(_nhwc(x.astype(numpy_dtype)), cp.asarray(w.astype(numpy_dtype)), None, **CONV)
    assert algoswap.is_channels_last(y) and y.shape == (2, 8, 9, 9)
    assert_op_close("conv2d", cp.asnumpy(y), _reference_conv(x, w), [x, w, None], {"padding": 1},
                    context=f"cuda:guess NHWC {dtype}")


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("activation", ["relu", "relu6", "silu", "gelu", "hardswish", "none"])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_half_precision_convolutions(dtype: str, activation: str, residual: bool) -> None:
    rng = _rng(len(dtype), len(activation), residual)
    x, w = _rounded(rng, (2, 32, 10, 10), HALF[dtype]), _rounded(rng, (32, 32, 3, 3), HALF[dtype], 0.1)
    b, r = _rounded(rng, (32,), HALF[dtype]), _rounded(rng, (2, 32, 10, 10), HALF[dtype]) if residual else None
    out = algoswap.ops.call("conv2d_fused", *(None if a is None else a.astype(HALF[dtype]) for a in (x, w, b, r)),
                            algorithm="cuda:guess", transfer=True, padding=1, activation=activation)
    ref = _activation(activation, _reference_conv(x, w, b) + (0 if r is None else r))
    terms = [x, w, b, r]
    assert_op_close("conv2d_fused", out, ref, terms, {"padding": 1, "activation": activation},
                    context=f"cuda:guess fused {dtype} {activation} residual={residual}")
    selection = algoswap.select("conv2d_fused", [x.shape, w.shape, b.shape, None if r is None else r.shape], dtype=dtype,
                                algorithm="cuda:guess", memory="cuda", padding=1, activation=activation)
    print(selection.kernel)


TENSOR_CORES = {**HALF, "float32": np.dtype(np.float32)}  # float32 with TF32: NHWC fused graphs as the half precisions


@pytest.mark.parametrize("dtype", sorted(TENSOR_CORES))
def test_fused_graphs_keep_nan_and_inf_as_torch_does(dtype: str) -> None:
    rng = _rng(11, len(dtype))
    x, w = _rounded(rng, (2, 16, 8, 8), TENSOR_CORES[dtype]), _rounded(rng, (16, 16, 3, 3), TENSOR_CORES[dtype], 0.1)
    b = _rounded(rng, (16,), TENSOR_CORES[dtype])
    x[0, 3, 2, 2], x[1, 5, 6, 1] = np.nan, np.inf
    for activation in ("relu", "relu6", "silu", "gelu", "hardswish", "none"):
        with algoswap.tf32_wishes(conv=True, matmul=True):
            out = algoswap.ops.call("conv2d_fused", *(a.astype(TENSOR_CORES[dtype]) for a in (x, w, b)), None,
                                    algorithm="cuda:guess", transfer=True, padding=1, activation=activation).astype(np.float64)
        ref = _activation(activation, _reference_conv(x, w, b))
        assert np.array_equal(np.isnan(out), np.isnan(ref)), f"{dtype} {activation}: NaN where torch has none, or lost"
        assert np.array_equal(np.isinf(out), np.isinf(ref)), f"{dtype} {activation}: inf differs"


def _float16_case(rng: np.random.Generator, shape: tuple[int, ...], weight: tuple[int, ...], case: str) -> tuple[np.ndarray, np.ndarray]:
    """float16 operands: a +inf, a -inf and a NaN planted, or finite inputs scaled so that some outputs overflow."""
    x = rng.standard_normal(shape)
    w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(np.float16)
    if case == "planted":
        x[0, 0, shape[2] // 2, shape[3] // 2], x[0, -1, 0, 0], x[-1, 1, -1, shape[3] // 3] = np.inf, -np.inf, np.nan
    else:
        x = np.clip(x * 30000.0, -60000.0, 60000.0)
    return x.astype(np.float16), w


def _assert_float16_non_finite_exact(out: np.ndarray, x: np.ndarray, w: np.ndarray, window: dict[str, int], what: str,
                                     edge_flips: float = 0.0) -> None:
    """``out``'s NaN, +inf and -inf where the float64 convolution, rounded once to float16, has them, up to
    ``edge_flips`` of its infinities rounded to a finite value at the range's edge (_exact.same_non_finite)."""
    import cupy
    from algoswap_cuda import _exact

    ref = np.asarray(algoswap.ops.call("conv2d", x.astype(np.float64), w.astype(np.float64), None, algorithm="numpy:smm", **window))
    with np.errstate(over="ignore"):
        ref = ref.astype(np.float16)
    out = np.asarray(out).astype(np.float16)
    assert _exact.same_non_finite(cupy.asarray(out), cupy.asarray(ref), 65504.0, edge_flips), (
        f"{what}: non-finite outputs differ from float64's ({int((np.isinf(out) != np.isinf(ref)).sum())} infinities, "
        f"{int((np.isnan(out) != np.isnan(ref)).sum())} NaN; {int(np.isinf(ref).sum())} infinities in float64)")


@pytest.mark.parametrize("algorithm", ["guess", "find"])
@pytest.mark.parametrize("case", ["planted", "overflow"])
def test_resnet50s_first_convolution_keeps_infinities_in_float16(algorithm: str, case: str) -> None:
    """cuDNN's engines for 3 input channels lost infinities (an overflow or a planted inf came out as 0, in torch too:
    benchmarks/cuda_float16_infinities.py): float16 forward plans are probed and one that keeps them is taken."""
    from algoswap_cuda import _exact

    window = {"stride": 2, "padding": 3}
    x, w = _float16_case(_rng(13, len(case), len(algorithm)), (2, 3, 224, 224), (64, 3, 7, 7), case)
    out = algoswap.ops.call("conv2d", x, w, None, algorithm=f"cuda:{algorithm}", transfer=True, **window)
    print(algoswap.select("conv2d", [x.shape, w.shape, None], dtype="float16", algorithm=f"cuda:{algorithm}",
                          memory="cuda", **window).kernel)
    _assert_float16_non_finite_exact(out, x, w, window, f"conv1 float16 {case} cuda:{algorithm}",
                                     _exact.EDGE_FLIPS if case == "overflow" else 0.0)


def test_a_float16_plan_that_loses_infinities_is_passed_over_or_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    """guess takes the first probed plan that keeps infinities; where none does, the first, marked, and the kernel
    after each call gives the exact non-finite outputs (fresh geometries: plans are cached per geometry)."""
    from algoswap_cuda import _exact

    probed: list[Any] = []
    monkeypatch.setattr(_exact, "keeps_infinities", lambda plan: probed.append(plan) or len(probed) > 1)
    window = {"stride": 1, "padding": 1}
    shapes = [(1, 8, 19, 23), (16, 8, 3, 3), None]
    kernel = algoswap.select("conv2d", shapes, dtype="float16", algorithm="cuda:guess", memory="cuda", **window).kernel
    assert len(probed) == 2 and "loses infinities" not in kernel, "the second plan, which keeps them, is taken"
    assert probed[1].name in kernel and not probed[1].loses_infinities, kernel

    monkeypatch.setattr(_exact, "keeps_infinities", lambda plan: False)
    x, w = _float16_case(_rng(14), (2, 8, 17, 21), (16, 8, 3, 3), "planted")
    kernel = algoswap.select("conv2d", [x.shape, w.shape, None], dtype="float16", algorithm="cuda:guess", memory="cuda",
                             **window).kernel
    assert "loses infinities: a kernel after each call recomputes" in kernel, kernel
    out = algoswap.ops.call("conv2d", x, w, None, algorithm="cuda:guess", transfer=True, **window)
    _assert_float16_non_finite_exact(out, x, w, window, "a plan marked as losing infinities, repaired")


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_convolution_gradients(dtype: str) -> None:
    rng = _rng(13, len(dtype))
    x, w = _rounded(rng, (2, 16, 8, 8), HALF[dtype]), _rounded(rng, (24, 16, 3, 3), HALF[dtype], 0.2)
    dy = _rounded(rng, (2, 24, 8, 8), HALF[dtype])
    attrs = {"padding": 1}
    for op, inputs, size in (("conv2d_grad_input", (dy, w), {"input_size": x.shape}),
                             ("conv2d_grad_weight", (dy, x), {"weight_size": w.shape})):
        out = algoswap.ops.call(op, *(a.astype(HALF[dtype]) for a in inputs), algorithm="cuda:guess", transfer=True, **attrs, **size)
        ref = algoswap.ops.call(op, *inputs, algorithm="numpy:default", **attrs, **size)
        assert out.dtype == HALF[dtype]
        assert_op_close(op, out, ref, list(inputs), {**attrs, **size}, context=f"cuda:guess {op} {dtype}")


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_linear_and_matmul(dtype: str) -> None:
    rng = _rng(17, len(dtype))
    x, w, b = _rounded(rng, (6, 5, 96), HALF[dtype]), _rounded(rng, (40, 96), HALF[dtype]), _rounded(rng, (40,), HALF[dtype])
    out = algoswap.ops.call("linear", *(a.astype(HALF[dtype]) for a in (x, w, b)), algorithm="cuda:gemm", transfer=True)
    ref = algoswap.ops.call("linear", x, w, b, algorithm="numpy:default")
    assert out.dtype == HALF[dtype]
    assert_op_close("linear", out, ref, [x, w, b], {}, context=f"cuda:gemm linear {dtype}")
    a, c = _rounded(rng, (3, 20, 64), HALF[dtype]), _rounded(rng, (3, 64, 12), HALF[dtype])
    attrs = {"trans_a": False, "trans_b": False}
    out = algoswap.ops.call("batch_matmul", a.astype(HALF[dtype]), c.astype(HALF[dtype]), algorithm="cuda:gemm", transfer=True, **attrs)
    ref = algoswap.ops.call("batch_matmul", a, c, algorithm="numpy:default", **attrs)
    assert_op_close("batch_matmul", out, ref, [a, c], attrs, context=f"cuda:gemm batch_matmul {dtype}")


def test_tf32_follows_the_callers_wish_unless_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    from algoswap_cuda import _runtime

    monkeypatch.delenv("ALGOSWAP_CUDA_TF32", raising=False)
    shapes = [(8, 64, 28, 28), (64, 64, 3, 3), None]

    def kernel() -> str:
        return algoswap.select("conv2d", shapes, algorithm="cuda:guess", memory="cuda", padding=1).kernel

    assert "TF32" not in kernel()
    with algoswap.tf32_wishes(conv=True, matmul=False):
        assert _runtime.tf32("conv") and not _runtime.tf32("matmul")
        assert "TF32" in kernel()
        _runtime.set_tf32(False)
        try:
            assert not _runtime.tf32("conv") and "TF32" not in kernel()
        finally:
            _runtime.set_tf32(None)
        monkeypatch.setenv("ALGOSWAP_CUDA_TF32", "0")
        assert not _runtime.tf32("conv")
    assert not _runtime.tf32("conv")


@pytest.mark.parametrize("dtype", ["float32", "float64", *sorted(HALF)])
def test_batched_products_of_every_layout(dtype: str) -> None:
    """_blas.matmul: one strided-batched GEMM for row- and column-major operands, broadcast batches, a
    batch of one, and cupy.matmul where the batch axes do not fold (each against NumPy in float64)."""
    from algoswap_cuda import _blas

    cp, numpy_dtype, rng = _cp(), np.dtype(dtype) if dtype in ("float32", "float64") else HALF[dtype], _rng(19, len(dtype))
    cases = {"row-major": ((2, 3, 7, 5), (2, 3, 5, 6), None), "a transposed": ((2, 3, 5, 7), (2, 3, 5, 6), "a"),
             "b transposed": ((4, 7, 5), (4, 6, 5), "b"), "broadcast b": ((2, 3, 7, 5), (5, 6), None),
             "broadcast batch": ((2, 1, 7, 5), (1, 3, 5, 6), None), "vector rows": ((3, 1, 5), (3, 5, 1), None),
             "batch axes that do not fold": ((3, 1, 7, 5), (3, 4, 5, 6), None)}
    for name, (shape_a, shape_b, transposed) in cases.items():
        a, b = _rounded(rng, shape_a, numpy_dtype), _rounded(rng, shape_b, numpy_dtype)
        left, right = cp.asarray(a.astype(numpy_dtype)), cp.asarray(b.astype(numpy_dtype))
        if transposed == "a":
            a, left = np.swapaxes(a, -1, -2), cp.swapaxes(left, -1, -2)
        if transposed == "b":
            b, right = np.swapaxes(b, -1, -2), cp.swapaxes(right, -1, -2)
        out = cp.asnumpy(_blas.matmul(left, right))
        assert out.dtype == numpy_dtype and out.shape == np.matmul(a, b).shape, name
        assert_close(out, np.matmul(a, b), reduction_length=a.shape[-1], scale=np.matmul(np.abs(a), np.abs(b)),
                     context=f"{name} {dtype}")
