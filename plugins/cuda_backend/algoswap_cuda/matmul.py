"""matmul and batch_matmul (optional transposes, broadcast batch dimensions) and their gradients on cuBLAS."""

from __future__ import annotations

from typing import Any

import cupy as cp

from ._blas import matmul as _product, precision
from .reduce import sum_to_shape


def _op(x: Any, transposed: bool) -> Any:
    return cp.swapaxes(x, -1, -2) if transposed else x


def matmul(a: Any, b: Any, *, trans_a: bool, trans_b: bool) -> Any:
    return _product(_op(a, trans_a), _op(b, trans_b))


def _grad_a(dy: Any, b: Any, trans_a: bool, trans_b: bool) -> Any:
    return _op(_product(dy, cp.swapaxes(_op(b, trans_b), -1, -2)), trans_a)


def _grad_b(dy: Any, a: Any, trans_a: bool, trans_b: bool) -> Any:
    return _op(_product(cp.swapaxes(_op(a, trans_a), -1, -2), dy), trans_b)


def matmul_grad_a(dy: Any, b: Any, *, trans_a: bool, trans_b: bool) -> Any:
    return cp.ascontiguousarray(_grad_a(dy, b, trans_a, trans_b))


def matmul_grad_b(dy: Any, a: Any, *, trans_a: bool, trans_b: bool) -> Any:
    return cp.ascontiguousarray(_grad_b(dy, a, trans_a, trans_b))


batch_matmul = matmul


def batch_matmul_grad_a(dy: Any, b: Any, *, trans_a: bool, trans_b: bool, a_size: tuple[int, ...]) -> Any:
    return sum_to_shape(_grad_a(dy, b, trans_a, trans_b), shape=a_size)


def batch_matmul_grad_b(dy: Any, a: Any, *, trans_a: bool, trans_b: bool, b_size: tuple[int, ...]) -> Any:
    return sum_to_shape(_grad_b(dy, a, trans_a, trans_b), shape=b_size)


def kernel(call: Any) -> str:
    return f"cuBLAS GEMM (cupy.matmul, {precision(call.dtype)})"
