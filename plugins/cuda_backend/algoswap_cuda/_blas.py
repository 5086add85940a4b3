"""Matrix products on cuBLAS, with TF32 allowed only when asked for (``_runtime.tf32("matmul")``), half
precisions (float16, bfloat16) accumulating in float32: one direct cublasGemmEx call for a linear layer's
row-major product, one cublasGemmStridedBatchedEx call for a batched product whose operands' batch axes fold
into one stride each (``_cublas``: cupy.matmul spends 30-70 µs of host time per call on its dispatch, ViT-B/16
makes 73 such calls per forward, and a CUDA graph cannot record it), cupy.matmul for the rest."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np
from cupy._core import _routines_linalg as _linalg

from . import _cublas, _runtime
from ._runtime import dtype_name

_set: dict[str, bool] = {}


def _follow_tf32() -> None:
    """CuPy's float32 compute type is process-wide: switch it only when our TF32 setting changed."""
    wanted = _runtime.tf32("matmul")
    if _set.get("tf32") is not wanted:
        _linalg.set_compute_type(np.float32, _linalg.COMPUTE_TYPE_TF32 if wanted else _linalg.COMPUTE_TYPE_DEFAULT)
        _set["tf32"] = wanted


def _float16_in_float32() -> None:
    """float16 products accumulate in float32 (CuPy's process-wide compute type for float16), set once."""
    if "float16" not in _set:
        _linalg.set_compute_type(np.float16, _linalg.COMPUTE_TYPE_FP32)
        _set["float16"] = True


def matmul(a: Any, b: Any) -> Any:
    """a @ b (batched, broadcasting) on cuBLAS: one strided-batched GEMM where each operand's batch
    dimensions fold into one stride (cupy.matmul otherwise, which a CUDA graph cannot record)."""
    if a.dtype == b.dtype and dtype_name(a.dtype) in DATA_TYPES and a.ndim >= 2 and b.ndim >= 2 and a.size and b.size:
        y = _strided_batched(a, b)
        if y is None:  # an operand whose batch axes do not fold (a head split's view): it alone made whole first
            y = _strided_batched(*_folding(a, b))
        if y is not None:
            return y
    if a.dtype == np.float32:
        _follow_tf32()
    elif a.dtype == np.float16:
        _float16_in_float32()
    return cp.matmul(a, b)


def _folding(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` as they are where cuBLAS reads each (its batch axes one stride, its matrices row- or column-major),
    else broadcast to their common batch shape and C-contiguous (a copy)."""
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))

    def read(x: Any) -> Any:
        if _column_major(x) is not None and _batch_stride(x, batch) is not None:
            return x
        return cp.ascontiguousarray(cp.broadcast_to(x, batch + x.shape[-2:]))

    return read(a), read(b)


def _column_major(x: Any) -> tuple[int, int] | None:
    """How cuBLAS reads the last two axes (R, C) of ``x`` as the column-major matrix X^T: (operation, leading
    dimension), in elements; None if they are neither row- nor column-major."""
    rows, cols = x.shape[-2:]
    row_stride, col_stride = (s // x.itemsize for s in x.strides[-2:])
    if (col_stride == 1 or cols == 1) and (rows == 1 or row_stride >= cols):
        return _cublas.OP_N, max(row_stride if rows > 1 else cols, 1)
    if (row_stride == 1 or rows == 1) and (cols == 1 or col_stride >= rows):
        return _cublas.OP_T, max(col_stride if cols > 1 else rows, 1)
    return None


def _batch_stride(x: Any, batch: tuple[int, ...]) -> int | None:
    """The one stride (in elements) that steps through ``x``'s batch axes broadcast to ``batch``; None if none does."""
    view = cp.broadcast_to(x, batch + x.shape[-2:]) if x.shape[:-2] != batch else x
    stride, expected = None, None
    for size, step in reversed(list(zip(batch, (s // x.itemsize for s in view.strides[:-2])))):
        if size == 1:
            continue
        if stride is None:
            stride, expected = step, step * size
        elif step != expected and not (stride == 0 and step == 0):
            return None
        else:
            expected = step * size
    return stride or 0


def _strided_batched(a: Any, b: Any) -> Any:
    """a @ b as one cublasGemmStridedBatchedEx call, or None where the layouts do not allow it."""
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if b.shape[-2] != k:
        return None
    read_a, read_b = _column_major(a), _column_major(b)
    stride_a, stride_b = _batch_stride(a, batch), _batch_stride(b, batch)
    if read_a is None or read_b is None or stride_a is None or stride_b is None:
        return None
    y = cp.empty(batch + (m, n), a.dtype)
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    if y.size == 0:
        return y
    kind, one, zero = DATA_TYPES[dtype_name(a.dtype)], *_SCALARS[dtype_name(a.dtype)]
    # row-major y = a @ b is column-major y^T = b^T a^T: b's reading first
    _cublas.gemm_strided_batched_ex(read_b[0], read_a[0], n, m, k, one.ctypes.data, b.data.ptr, kind, read_b[1], stride_b,
                                    a.data.ptr, kind, read_a[1], stride_a, zero.ctypes.data, y.data.ptr, kind, n, m * n, count,
                                    compute_type(dtype_name(a.dtype)))
    return y


# cudaDataType_t: CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF
DATA_TYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 77, 70  # cublasComputeType_t
# alpha = 1, beta = 0 in host memory, in the compute type's precision (float32 for the half precisions)
_SCALARS = {name: (np.ones(1, "float64" if name == "float64" else "float32"),
                   np.zeros(1, "float64" if name == "float64" else "float32")) for name in DATA_TYPES}


def precision(dtype: str) -> str:
    """How cuBLAS computes products of ``dtype`` now, in words (what explain shows)."""
    if dtype == "float32":
        return "TF32 tensor cores" if _runtime.tf32("matmul") else "float32, no TF32"
    return "float32 accumulation" if dtype in _runtime.HALF else dtype


def compute_type(dtype: str) -> int:
    """cuBLAS's compute type for products of ``dtype``: float64 in float64, float32 in TF32 where allowed,
    the rest (the half precisions too) in float32."""
    if dtype == "float64":
        return _COMPUTE_64F
    return _COMPUTE_32F_FAST_TF32 if dtype == "float32" and _runtime.tf32("matmul") else _COMPUTE_32F


def rows_times_transposed(x: Any, w: Any) -> Any:
    """x (M, K) @ w (N, K).T as a new (M, N) array, both operands C-contiguous, of one dtype of DATA_TYPES, with
    M, N, K > 0: one cublasGemmEx call (row-major y is y.T column-major: w.T's columns times x.T's)."""
    m, k = x.shape
    n = w.shape[0]
    y = cp.empty((m, n), x.dtype)
    kind, one, zero = DATA_TYPES[dtype_name(x.dtype)], *_SCALARS[dtype_name(x.dtype)]
    _cublas.gemm_ex(_cublas.OP_T, _cublas.OP_N, n, m, k, one.ctypes.data, w.data.ptr, kind, k, x.data.ptr, kind, k,
                    zero.ctypes.data, y.data.ptr, kind, n, compute_type(dtype_name(x.dtype)))
    return y
