"""linear and its gradients as cuBLAS matrix products (leading dimensions folded into rows)."""

from __future__ import annotations

from typing import Any

from ._blas import matmul


def _rows(a: Any) -> Any:
    return a.reshape(-1, a.shape[-1])


def linear(x: Any, w: Any, b: Any) -> Any:
    """x @ w.T + b."""
    y = matmul(_rows(x), w.T)
    if b is not None:
        y += b
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def linear_grad_input(dy: Any, w: Any) -> Any:
    return matmul(_rows(dy), w).reshape(dy.shape[:-1] + (w.shape[1],))


def linear_grad_weight(dy: Any, x: Any) -> Any:
    return matmul(_rows(dy).T, _rows(x))


def linear_grad_bias(dy: Any) -> Any:
    return _rows(dy).sum(axis=0)


def kernel(call: Any) -> str:
    return "cuBLAS GEMM (cupy.matmul)"
