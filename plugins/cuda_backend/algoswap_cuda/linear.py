"""linear and its gradients as cuBLAS matrix products (leading dimensions folded into rows). The forward with a
bias in float32, float16 and bfloat16 is one cublasLtMatmul adding the bias in its epilogue (``_cublaslt``) where
cuBLASLt has an algorithm for the call; else (float64 too) one cublasGemmEx call and one raw kernel adding it."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _cublaslt, _epilogue
from .reduce import total
from ._blas import DATA_TYPES, matmul, precision, rows_times_transposed
from ._runtime import dtype_name


def _rows(a: Any) -> Any:
    return a.reshape(-1, a.shape[-1])


def linear(x: Any, w: Any, b: Any) -> Any:
    """x @ w.T + b."""
    rows = _rows(x)
    if _direct(rows, w):
        y = None if b is None else _cublaslt.linear(rows, w, b)
        if y is None:
            y = rows_times_transposed(rows, w)
            if b is not None:
                _epilogue.apply(y.reshape(y.shape + (1, 1)), b if b.flags.c_contiguous else b.copy())  # b[j] per column
        return y.reshape(x.shape[:-1] + (w.shape[0],))
    y = matmul(rows, w.T)
    if b is not None:
        y += b
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def _direct(rows: Any, w: Any) -> bool:
    """Whether the product can be one cublasGemmEx call: a dtype cuBLAS takes, C-contiguous, nothing empty."""
    return (dtype_name(rows.dtype) in DATA_TYPES and rows.dtype == w.dtype and rows.flags.c_contiguous
            and w.flags.c_contiguous and 0 not in rows.shape and w.shape[0] > 0)


def linear_grad_input(dy: Any, w: Any) -> Any:
    return matmul(_rows(dy), w).reshape(dy.shape[:-1] + (w.shape[1],))


def linear_grad_weight(dy: Any, x: Any) -> Any:
    return matmul(_rows(dy).T, _rows(x))


def linear_grad_bias(dy: Any) -> Any:
    return total(_rows(dy), 0)


def kernel(call: Any) -> str:
    gemm = f"cuBLAS GEMM (cublasGemmEx, {precision(call.dtype)}"
    if call.shape("bias") is None:
        return gemm + ")"
    x, (n, k) = call.shape("input"), call.shape("weight")
    found = _cublaslt.plan(call.dtype, int(np.prod(x[:-1], dtype=np.int64)), n, k)
    if not isinstance(found, str):
        return f"{found.label}, {precision(call.dtype)}"
    return f"{gemm}; then one raw kernel adding the bias: cuBLASLt not used, {found})"
