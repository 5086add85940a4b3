"""float16 and bfloat16 on the CUDA backend's own ops (everything but convolution, linear and matmul): what the
conformance suites do not show. Those suites (tests/test_conformance.py, tests/test_nonfinite.py and
``python -m algoswap.testing cuda``) already run every implementation in every dtype it declares, the half
types included, on the kit's small cases with NaN and infinities planted; here the same ops run on shapes of
real models (rows longer than a block of threads, sums over 2**16 terms, hundreds of channels), compared with
the NumPy reference in float64 under the tolerance policy (bounds from the format's unit roundoff), and
NaN spreads through relu and max pooling in float16 as in torch.

Skipped without a GPU exactly as tests/test_cuda.py is; on the GPU: benchmarks/cuda_device_run.sh, or
``python -m pytest tests/test_cuda_half.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap.testing._cases import reference_name
from algoswap.testing._inputs import Arg, draw
from helpers import assert_op_close, fail

pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
gpu = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
HALF = ("float16", "bfloat16")

IMAGE, ROWS = (4, 64, 28, 28), (8, 197, 768)
POOLED = (4, 64, 14, 14)  # IMAGE through a 3x3 window, stride 2, padding 1
POOL: dict[str, Any] = {"kernel_size": 3, "stride": 2, "padding": 1}
# op -> (inputs as the conformance kit draws them: shapes or Args, attributes): model-sized
CASES: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "relu": ((Arg(IMAGE, "wide"),), {}),
    "relu_grad": ((IMAGE, Arg(IMAGE, "wide")), {}),
    "silu": ((Arg(IMAGE, "wide"),), {}),
    "silu_grad": ((IMAGE, Arg(IMAGE, "wide")), {}),
    "gelu": ((Arg(ROWS, "wide"),), {"approximate": "none"}),
    "gelu_grad": ((ROWS, Arg(ROWS, "wide")), {"approximate": "tanh"}),
    "hardswish": ((Arg(IMAGE, "wide"),), {}),
    "hardtanh": ((Arg(IMAGE, "wide"),), {"min_val": 0.0, "max_val": 6.0}),  # relu6
    "sigmoid": ((Arg(IMAGE, "wide"),), {}),
    "sigmoid_grad": ((IMAGE, Arg(IMAGE, "unit")), {}),
    "tanh": ((Arg(IMAGE, "wide"),), {}),
    "leaky_relu": ((Arg(IMAGE, "wide"),), {"negative_slope": 0.1}),
    "add": ((IMAGE, IMAGE), {}),
    "mul": ((IMAGE, (1, 64, 1, 1)), {}),
    "div": ((IMAGE, Arg(IMAGE, "positive")), {}),
    "batchnorm2d": ((IMAGE, (64,), Arg((64,), "positive"), (64,), (64,)), {"eps": 1e-5}),
    "batchnorm2d_fused": ((IMAGE, (64,), Arg((64,), "positive"), (64,), (64,)), {"eps": 1e-5, "activation": "silu"}),
    "layer_norm": ((ROWS, (768,), (768,)), {}),
    "softmax": (((8, 12, 197, 197),), {"axis": -1}),
    "log_softmax": (((64, 1000),), {"axis": 1}),
    "concat": ((IMAGE, IMAGE, (4, 32, 28, 28)), {"axis": 1}),
    "maxpool2d": ((IMAGE,), POOL),
    "maxpool2d_grad": ((POOLED, IMAGE), POOL),
    "avgpool2d": ((IMAGE,), POOL),
    "avgpool2d_grad": ((POOLED,), {**POOL, "input_size": IMAGE}),
    "adaptiveavgpool2d": (((8, 512, 7, 7),), {"output_size": 1}),
    "adaptiveavgpool2d_grad": (((8, 512, 1, 1),), {"input_size": (8, 512, 7, 7)}),
    "interpolate": (((4, 64, 14, 14),), {"scale_factor": 2, "mode": "bilinear"}),
    "interpolate_grad": (((4, 64, 28, 28),), {"input_size": (4, 64, 14, 14), "scale_factor": (2.0, 2.0), "mode": "bilinear",
                                               "align_corners": False}),
    "reduce_sum": (((4, 2**16),), {"axes": (1,)}),  # 2**16 terms: a half-precision sum would be far off
    "reduce_mean": (((8, 512, 7, 7),), {"axes": (2, 3), "keepdims": True}),
    "sum_to_shape": ((IMAGE,), {"shape": (64, 1, 1)}),
    "scaled_dot_product_attention": (((2, 8, 197, 64), (2, 8, 197, 64), (2, 8, 197, 64), None), {}),
}


def _as(array: Any, dtype: str) -> Any:
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        return array
    return array.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def _check(op: str, entries: tuple[Any, ...], attrs: dict[str, Any], dtype: str, rng: np.random.Generator) -> None:
    """cuda:direct in ``dtype`` against the reference in float64 on the same (rounded) inputs."""
    inputs = [_as(draw(rng, entry, "float64"), dtype) for entry in entries]
    wide = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype != np.float64 and a.dtype.kind != "i" else a
            for a in inputs]
    out = algoswap.ops.call(op, *inputs, algorithm="cuda:direct", transfer=True, **attrs)
    if str(out.dtype) != dtype:
        fail(f"{op} in {dtype} returned {out.dtype}")
    ref = algoswap.ops.call(op, *wide, algorithm=reference_name(op), **attrs)
    assert_op_close(op, out, ref, wide, attrs, context=f"{op} ({dtype}) on {[getattr(a, 'shape', None) for a in inputs]}")


@gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", list(CASES))
def test_model_sized_ops_match_the_reference(op: str, dtype: str, rng: np.random.Generator) -> None:
    entries, attrs = CASES[op]
    _check(op, entries, attrs, dtype, rng)


def _planted(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> Any:
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, np.nan, -0.0, 0.0]
    flat[rng.choice(flat.size, 12, replace=False)] = np.nan
    x[0, 1, 2:4, 2:4] = -np.inf  # a whole pooling window of -inf
    return _as(x, dtype)


@gpu
@pytest.mark.parametrize("dtype", HALF)
def test_relu_and_max_pooling_spread_nan_as_torch(dtype: str, rng: np.random.Generator) -> None:
    """relu of NaN is NaN, of inf inf, of -inf 0; a max-pooling window holding a NaN gives NaN (its gradient
    goes there), one of -inf gives -inf: exactly the reference's (torch's) values, in float16 and bfloat16."""
    x = _planted(rng, (2, 3, 9, 9), dtype)
    wide = x.astype(np.float64)
    for op, attrs in (("relu", {}), ("maxpool2d", {"kernel_size": 2, "stride": 2}), ("maxpool2d", POOL)):
        got = algoswap.ops.call(op, x, algorithm="cuda:direct", transfer=True, **attrs).astype(np.float64)
        ref = algoswap.ops.call(op, wide, algorithm=reference_name(op), **attrs)
        if not np.array_equal(got, ref, equal_nan=True):  # relu and max are exact: equal, NaN where NaN
            where = np.argwhere(~((got == ref) | (np.isnan(got) & np.isnan(ref))))[:5].tolist()
            fail(f"{op} {attrs} ({dtype}) differs from the reference at {where}")
    assert np.isnan(algoswap.ops.call("relu", x[:1, :1, :1, :1], algorithm="cuda:direct", transfer=True)).all()
    dy = _as(rng.standard_normal((2, 3, 5, 5)), dtype)
    got = algoswap.ops.call("maxpool2d_grad", dy, x, algorithm="cuda:direct", transfer=True, **POOL)
    ref = algoswap.ops.call("maxpool2d_grad", dy.astype(np.float64), wide, algorithm=reference_name("maxpool2d_grad"), **POOL)
    assert_op_close("maxpool2d_grad", got, ref, [dy.astype(np.float64), wide], POOL)
