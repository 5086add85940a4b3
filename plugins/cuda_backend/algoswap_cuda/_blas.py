"""Matrix products on cuBLAS, with TF32 allowed only when the user asked for it: through cupy.matmul
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
    wanted = _runtime.tf32()
    if _set.get("tf32") is not wanted:
        _linalg.set_compute_type(np.float32, _linalg.COMPUTE_TYPE_TF32 if wanted else _linalg.COMPUTE_TYPE_DEFAULT)
        _set["tf32"] = wanted


def matmul(a: Any, b: Any) -> Any:
    """a @ b (batched, broadcasting) on cuBLAS."""
    if a.dtype == np.float32:
        _follow_tf32()
    return cp.matmul(a, b)


_DATA_TYPES = {"float32": 0, "float64": 1}  # cudaDataType_t: CUDA_R_32F, CUDA_R_64F
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 77, 70  # cublasComputeType_t
_SCALARS = {name: (np.ones(1, name), np.zeros(1, name)) for name in _DATA_TYPES}  # alpha = 1, beta = 0, in host memory


def rows_times_transposed(x: Any, w: Any) -> Any:
    """x (M, K) @ w (N, K).T as a new (M, N) array, both operands C-contiguous float32 or float64 with
    M, N, K > 0: one cublasGemmEx call (row-major y is y.T column-major: w.T's columns times x.T's)."""
    from cupy_backends.cuda.libs import cublas  # loads libcublasLt: not at import (the probe imports no CUDA library)

    m, k = x.shape
    n = w.shape[0]
    y = cp.empty((m, n), x.dtype)
    data_type = _DATA_TYPES[x.dtype.name]
    compute = _COMPUTE_64F if x.dtype == np.float64 else _COMPUTE_32F_FAST_TF32 if _runtime.tf32() else _COMPUTE_32F
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
