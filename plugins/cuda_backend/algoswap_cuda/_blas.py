"""Matrix products on cuBLAS, with TF32 allowed only when asked for (``_runtime.tf32("matmul")``), half
precisions (float16, bfloat16) accumulating in float32: through cupy.matmul
(batched, broadcasting), and a linear layer's row-major product as one direct cublasGemmEx call (cupy.matmul
spends 30-70 µs of host time per call on its dispatch: ViT-B/16 makes 73 such calls per forward)."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np
from cupy._core import _routines_linalg as _linalg

from . import _graphs, _runtime

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
    """a @ b (batched, broadcasting) on cuBLAS."""
    if a.dtype == np.float32:
        _follow_tf32()
    elif a.dtype == np.float16:
        _float16_in_float32()
    return cp.matmul(a, b)


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
    from cupy_backends.cuda.libs import cublas  # loads libcublasLt: not at import (the probe imports no CUDA library)

    m, k = x.shape
    n = w.shape[0]
    y = cp.empty((m, n), x.dtype)
    data_type = DATA_TYPES[x.dtype.name]
    compute = compute_type(x.dtype.name)
    one, zero = _SCALARS[x.dtype.name]
    handle = cp.cuda.device.get_cublas_handle()
    args = (cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, n, m, k, one.ctypes.data, w.data.ptr, data_type, k,
            x.data.ptr, data_type, k, zero.ctypes.data, y.data.ptr, data_type, n, compute, cublas.CUBLAS_GEMM_DEFAULT)
    if _graphs.capturing():  # recording a CUDA graph: CuPy's wrappers refuse the capturing stream
        _graphs.gemm_ex(handle, *args)
        return y
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.gemmEx(handle, *args)
    return y
