"""cuBLAS called directly through ctypes, on the library CuPy loaded: CuPy 14.2's own wrappers refuse a
stream that is recording a CUDA graph ("calling cuBLAS API during stream capture is currently unsupported"),
although cuBLAS supports capture, and cupy.matmul spends 30-70 us of host time per call on its dispatch.
Every call runs on CuPy's current stream with host scalars."""

from __future__ import annotations

import ctypes
from typing import Any

import cupy as cp

_state: dict[str, Any] = {}
_POINTER, _INT, _LONG = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
OP_N, OP_T = 0, 1  # cublasOperation_t
GEMM_DEFAULT = -1  # cublasGemmAlgo_t


def gemm_ex(transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int, a_type: int, lda: int,
            b: int, b_type: int, ldb: int, beta: int, c: int, c_type: int, ldc: int, compute: int) -> None:
    """cublasGemmEx (column-major C = alpha op(A) op(B) + beta C; ``alpha``, ``beta``: host addresses)."""
    library = _on_current_stream()
    _check(library.cublasGemmEx(_handle(), transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type,
                                ldc, compute, GEMM_DEFAULT), "cublasGemmEx")


def gemm_strided_batched_ex(transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int, a_type: int, lda: int,
                            stride_a: int, b: int, b_type: int, ldb: int, stride_b: int, beta: int, c: int, c_type: int,
                            ldc: int, stride_c: int, batches: int, compute: int) -> None:
    """cublasGemmStridedBatchedEx: ``batches`` products, operand i at pointer + i * stride (in elements)."""
    library = _on_current_stream()
    _check(library.cublasGemmStridedBatchedEx(_handle(), transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type,
                                              ldb, stride_b, beta, c, c_type, ldc, stride_c, batches, compute, GEMM_DEFAULT),
           "cublasGemmStridedBatchedEx")


def back_on_null() -> None:
    """CuPy's cuBLAS handle back on the null stream (after calls on a capturing stream)."""
    library = _state.get("library")
    if library is not None:
        _check(library.cublasSetStream_v2(_handle(), cp.cuda.Stream.null.ptr), "cublasSetStream")


def _handle() -> int:
    handle: int = cp.cuda.device.get_cublas_handle()
    return handle


def _on_current_stream() -> Any:
    library = _library()
    _check(library.cublasSetStream_v2(_handle(), cp.cuda.get_current_stream().ptr), "cublasSetStream")
    _check(library.cublasSetPointerMode_v2(_handle(), 0), "cublasSetPointerMode")  # CUBLAS_POINTER_MODE_HOST
    return library


def _check(status: int, name: str) -> None:
    if status != 0:
        raise RuntimeError(f"{name} failed: cuBLAS status {status}")


def _library() -> Any:
    """libcublas as CuPy loaded it (found in the process's memory map; else by its usual names)."""
    library = _state.get("library")
    if library is None:
        from cupy_backends.cuda.libs import cublas  # noqa: F401 - loads libcublas

        library = _state["library"] = _declared(ctypes.CDLL(_loaded_path("/libcublas.so") or _usual_name()))
    return library


def _loaded_path(marker: str) -> str:
    try:
        with open("/proc/self/maps") as maps:
            return next((line.split()[-1] for line in maps if marker in line), "")
    except OSError:
        return ""


def _usual_name() -> str:
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    raise OSError("libcublas is not loaded and none of its usual names loads")


def _declared(library: Any) -> Any:
    p, i, q = _POINTER, _INT, _LONG
    library.cublasSetStream_v2.argtypes = [p, p]
    library.cublasSetPointerMode_v2.argtypes = [p, i]
    library.cublasGemmEx.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
    library.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, q, p, i, i, q, p, p, i, i, q, i, i, i]
    for function in (library.cublasSetStream_v2, library.cublasSetPointerMode_v2, library.cublasGemmEx,
                     library.cublasGemmStridedBatchedEx):
        function.restype = i
    return library
