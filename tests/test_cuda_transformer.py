"""The CUDA backend's transformer path (issue 16): cuDNN's fused attention for scaled_dot_product_attention in
float16 and bfloat16 (strided q, k, v; is_causal), linear with its bias in a cuBLASLt epilogue, the warp-per-row
layer norm, and torchvision's vit_b_16 through swap_backend in bfloat16, captured as one CUDA graph. GPU only
(benchmarks/cuda_device_run.sh); without a GPU every test here is skipped with the backend's reason.

Each result is compared with the NumPy reference in float64 on the same (rounded) inputs under the tolerance
policy (tests/helpers.py), NaN and infinities exactly where the reference has them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import assert_close, assert_op_close, backend_unavailable, derived_seed, network_terms

pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
ml_dtypes = pytest.importorskip("ml_dtypes")
pytestmark = pytest.mark.skipif(bool(backend_unavailable("cuda")), reason=backend_unavailable("cuda"))
HALF = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
DTYPES = {"float32": np.dtype(np.float32), **HALF}
SDPA = "scaled_dot_product_attention"


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(derived_seed(*keys))


def _rounded(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any], scale: float = 1.0) -> np.ndarray:
    """Random values representable in ``dtype`` (as float64): the reference sees the inputs the GPU does."""
    return (rng.standard_normal(shape) * scale).astype(dtype).astype(np.float64)


def _cp() -> Any:
    import cupy

    return cupy


def _heads_split(cp: Any, array: np.ndarray, dtype: np.dtype[Any]) -> Any:
    """``array`` (B, H, L, E) on the GPU as a head split makes it: a (B, H, L, E) view of (B, L, H, E) memory."""
    return cp.ascontiguousarray(cp.asarray(array.astype(dtype)).transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype: str, strided: bool, causal: bool, scale: float) -> tuple[Any, Any]:
    """(cuDNN's result in its dtype, so that the bound is the format's, or None where it declined; the reference)."""
    from algoswap_cuda import _sdpa

    cp = _cp()
    arrays = [_heads_split(cp, a, HALF[dtype]) if strided else cp.asarray(a.astype(HALF[dtype])) for a in (q, k, v)]
    out = _sdpa.forward(*arrays, causal, scale)
    ref = algoswap.ops.call(SDPA, q, k, v, None, algorithm="numpy:default", is_causal=causal, scale=scale)
    if out is not None and strided:
        assert out.transpose(0, 2, 1, 3).flags.c_contiguous, "the output is written in q's memory order"
    return None if out is None else cp.asnumpy(out), ref


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "head-split views"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_attention_matches_the_reference(dtype: str, strided: bool, causal: bool) -> None:
    rng = _rng(31, len(dtype), strided, causal)
    for lengths in ((37, 37), (29, 53)):  # self-attention, and more keys than queries (top-left causal mask)
        q = _rounded(rng, (2, 4, lengths[0], 64), HALF[dtype])
        k, v = (_rounded(rng, (2, 4, lengths[1], 64), HALF[dtype]) for _ in range(2))
        scale = 0.3 if causal else 1 / math.sqrt(64)
        out, ref = _attention(q, k, v, dtype, strided, causal, scale)
        assert out is not None, "cuDNN's fused attention declined a call it serves on the H200"
        assert_op_close(SDPA, out, ref, [q, k, v, None], {"is_causal": causal, "scale": scale},
                        context=f"cuDNN attention {dtype} {lengths} strided={strided} causal={causal}")
    kernel = algoswap.select(SDPA, [q.shape, k.shape, v.shape, None], dtype, "cuda:direct", memory="cuda", is_causal=causal).kernel
    assert kernel.startswith("cuDNN") and "fused attention" in kernel, kernel


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_fused_attention_keeps_nan_and_inf_where_the_reference_has_them(dtype: str) -> None:
    """A NaN in a query makes its row NaN, one in a key every row, one in a value its column; an infinite key
    gives NaN rows or zero weights; a query whose every score is -inf attends to nothing (zeros, torch's
    _safe_softmax): cuDNN's flash attention as the reference, exactly."""
    rng = _rng(37, len(dtype))
    q, k, v = (_rounded(rng, (2, 4, 24, 64), HALF[dtype]) for _ in range(3))
    q[0, 0, 3, 7] = np.nan
    k[0, 1, 5, 2] = np.inf
    v[1, 2, 7, 1], v[1, 3, 2, 0] = np.nan, np.inf
    q[1, 0, 4] = 0.0
    q[1, 0, 4, 0] = np.inf
    k[1, 0, :, 0] = -np.abs(k[1, 0, :, 0]) - 0.5  # every score of query (1, 0, 4) is -inf
    for strided in (False, True):
        out, ref = _attention(q, k, v, dtype, strided, False, 0.125)
        assert out is not None
        assert np.all(ref[1, 0, 4] == 0) and np.isnan(ref[0, 0, 3]).all() and np.isnan(ref[1, 2, :, 1]).all()
        got = np.asarray(out, np.float64)
        context = f"cuDNN attention {dtype} with NaN and inf, strided={strided}"
        assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref)), context
        finite = np.isfinite(ref)  # the rest against the finite terms' scale (a NaN term has no magnitude)
        assert_op_close(SDPA, np.where(finite, out, out.dtype.type(0)), np.where(finite, ref, 0.0),  # out in its format
                        [np.where(np.isfinite(a), a, 0.0) for a in (q, k, v)] + [None], {"is_causal": False, "scale": 0.125},
                        context=context)


def test_attention_without_cudnn_says_why_and_matches_the_reference() -> None:
    """float32, a mask and a head size cuDNN declines keep the cuBLAS products around the softmax; explain says why."""
    rng = _rng(41)
    cases = {"float32": ((2, 3, 20, 64), "float32", None), "a mask": ((2, 3, 20, 64), "bfloat16", (20, 20)),
             "head size 6": ((2, 3, 20, 6), "bfloat16", None)}
    for name, (shape, dtype, mask_shape) in cases.items():
        q, k, v = (_rounded(rng, shape, DTYPES[dtype]) for _ in range(3))
        mask = None if mask_shape is None else _rounded(rng, mask_shape, DTYPES[dtype])
        kernel = algoswap.select(SDPA, [shape, shape, shape, mask_shape], dtype, "cuda:direct", memory="cuda").kernel
        assert kernel.startswith("cuBLAS") and "not cuDNN's fused attention" in kernel, (name, kernel)
        inputs = [None if a is None else a.astype(DTYPES[dtype]) for a in (q, k, v, mask)]
        out = algoswap.ops.call(SDPA, *inputs, algorithm="cuda:direct", transfer=True)
        ref = algoswap.ops.call(SDPA, q, k, v, mask, algorithm="numpy:default")
        assert_op_close(SDPA, out, ref, [q, k, v, mask], {"is_causal": False, "scale": 1 / math.sqrt(shape[-1])}, context=name)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_linear_adds_its_bias_in_a_cublaslt_epilogue(dtype: str) -> None:
    rng = _rng(43, len(dtype))
    x, w, b = _rounded(rng, (4, 50, 96), DTYPES[dtype]), _rounded(rng, (72, 96), DTYPES[dtype], 0.1), _rounded(rng, (72,), DTYPES[dtype])
    kernel = algoswap.select("linear", [x.shape, w.shape, b.shape], dtype, "cuda:gemm", memory="cuda").kernel
    assert kernel.startswith("cuBLASLt matmul with bias in its epilogue"), kernel
    x[0, 3, 5], w[7, 2], b[9] = np.nan, np.inf, -np.inf
    out = algoswap.ops.call("linear", *(a.astype(DTYPES[dtype]) for a in (x, w, b)), algorithm="cuda:gemm", transfer=True)
    ref = algoswap.ops.call("linear", x, w, b, algorithm="numpy:default")
    assert out.dtype == DTYPES[dtype]
    assert_op_close("linear", out, ref, [x, w, b], {}, context=f"cuBLASLt linear {dtype}")


def test_cublaslt_takes_operands_off_its_alignment_by_a_copy() -> None:
    """An input view starting off a 256-byte boundary (an offset into a larger array) gives the same values."""
    from algoswap_cuda import _cublaslt

    cp, rng = _cp(), _rng(47)
    x, w, b = _rounded(rng, (65, 128), HALF["bfloat16"]), _rounded(rng, (48, 128), HALF["bfloat16"]), _rounded(rng, (48,), HALF["bfloat16"])
    shifted = cp.asarray(x.astype(HALF["bfloat16"]))[1:]  # 256 bytes in: aligned to 256 but not 512; then a 2-byte shift
    misaligned = cp.asarray(np.concatenate([np.zeros(1), x.reshape(-1)]).astype(HALF["bfloat16"]))[1:].reshape(65, 128)[1:]
    for operand, rows in ((shifted, x[1:]), (misaligned, x[1:])):
        out = _cublaslt.linear(operand, cp.asarray(w.astype(HALF["bfloat16"])), cp.asarray(b.astype(HALF["bfloat16"])))
        assert out is not None
        assert_op_close("linear", cp.asnumpy(out), rows @ w.T + b, [rows, w, b], {}, context="misaligned linear")


def test_the_transformer_kernels_record_in_a_cuda_graph() -> None:
    """cuDNN's attention and the cuBLASLt linear inside algoswap_cuda._graphs.capture: the replay gives new inputs'
    results (no host synchronisation, no allocation outside CuPy's pool)."""
    from algoswap_cuda import _graphs, attention, linear

    cp, rng = _cp(), _rng(53)
    dtype = HALF["bfloat16"]
    w, b = (cp.asarray(_rounded(rng, shape, dtype, 0.1).astype(dtype)) for shape in ((256, 256), (256,)))

    def run(inputs: Any) -> list[Any]:
        (x,) = inputs
        qkv = linear.linear(x, w, b).reshape(2, 40, 4, 64).transpose(0, 2, 1, 3)
        return [attention.scaled_dot_product_attention(qkv, qkv, qkv, None, is_causal=True, scale=0.125)]

    first, second = (cp.asarray(_rounded(rng, (2, 40, 256), dtype).astype(dtype)) for _ in range(2))
    expected = run([second])[0]
    replay = _graphs.capture(run, [first])
    got = replay([second])[0]
    assert got.shape == expected.shape
    assert_close(cp.asnumpy(got).astype(np.float64), cp.asnumpy(expected).astype(np.float64), dtype="bfloat16",
                 ref_dtype="bfloat16", reduction_length=256, context="replayed against eager")


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_layer_norm_warp_and_block_kernels(dtype: str) -> None:
    """Rows of 768 (one warp each, 16-byte loads), 197 (one value per load) and 5000 (a block of threads each)."""
    rng = _rng(59, len(dtype))
    for d in (768, 197, 5000):
        x, w, b = _rounded(rng, (6, 33, d), HALF[dtype]), _rounded(rng, (d,), HALF[dtype]), _rounded(rng, (d,), HALF[dtype])
        attrs = {"normalized_ndim": 1, "eps": 1e-5}
        out = algoswap.ops.call("layer_norm", *(a.astype(HALF[dtype]) for a in (x, w, b)), algorithm="cuda:direct", transfer=True, **attrs)
        ref = algoswap.ops.call("layer_norm", x, w, b, algorithm="numpy:default", **attrs)
        assert_op_close("layer_norm", out, ref, [x, w, b], attrs, context=f"layer_norm rows of {d} ({dtype})")


def test_vit_b_16_in_bfloat16_matches_torch_and_replays_as_one_cuda_graph() -> None:
    """torchvision's vit_b_16 swapped in bfloat16 (batch 2): within the bfloat16 network bound of torch eager in
    bfloat16; the second call captures (the class token is broadcast once, when planning), the third replays;
    attention runs on cuDNN's fused attention, every linear's bias in a cuBLASLt epilogue, no step on the host."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision", reason="torchvision is not installed")
    module = algoswap.zoo.build("torchvision:vit_b_16").cuda().eval()
    x = torch.randn(2, 3, 224, 224, device="cuda")
    model = algoswap.swap_backend(module, None, tuple(x.shape), dtype=torch.bfloat16)
    with torch.no_grad():
        eager = module.to(torch.bfloat16)(x.to(torch.bfloat16))
    modes = []
    for _ in range(3):
        out = model(x.to(torch.bfloat16))
        modes.append(model.capture_report.mode)
    assert modes == ["eager", "capture", "replay"], model.explain().capture
    terms = network_terms(module, functional=(64, 197) * 12)
    assert_close(out.float().cpu(), eager.float().cpu(), dtype="bfloat16", ref_dtype="bfloat16", **terms)
    rows = model.explain()
    assert [row.op for row in rows if "computed once, when planning" in row.note] == ["broadcast_to"]
    attention = [row.kernel for row in rows if row.op == SDPA]
    assert len(attention) == 12 and all(kernel.startswith("cuDNN") for kernel in attention), attention[:1]
    linears = [row.kernel for row in rows if row.op == "linear"]
    assert linears and all(kernel.startswith("cuBLASLt") for kernel in linears), linears[:1]
    assert all(step.backend == "cuda" for step in model.program.steps if step.runner is not None)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_products_of_head_split_views_match_the_reference(dtype: str) -> None:
    """q @ k^T and weights @ v on a head split's views (the float32 attention path, and matmul, now layout "any"):
    only the operand whose batch axes do not fold is copied; the values are the reference's."""
    from algoswap_cuda import _blas

    cp, rng = _cp(), _rng(61, len(dtype))
    q, k = _rounded(rng, (2, 3, 17, 32), DTYPES[dtype]), _rounded(rng, (2, 3, 19, 32), DTYPES[dtype])
    weights = _rounded(rng, (2, 3, 17, 19), DTYPES[dtype])
    left, right = _heads_split(cp, q, DTYPES[dtype]), _heads_split(cp, k, DTYPES[dtype])
    for a, b, x, y in ((left, cp.swapaxes(right, -1, -2), q, np.swapaxes(k, -1, -2)),
                       (cp.asarray(weights.astype(DTYPES[dtype])), right, weights, k)):
        out = cp.asnumpy(_blas.matmul(a, b)).astype(np.float64)
        assert_close(out, x @ y, dtype=DTYPES[dtype], reduction_length=x.shape[-1], scale=np.abs(x) @ np.abs(y),
                     context=f"{dtype} {a.shape} @ {b.shape}")
    kernel_layout = algoswap.registry().impls[("matmul", "gemm", "cuda")].layout
    assert kernel_layout == "any"
