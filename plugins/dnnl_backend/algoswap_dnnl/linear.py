"""linear and its gradients on the oneDNN matmul primitive (leading dimensions folded into rows)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, refusal


def _rows(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1, a.shape[-1])


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x @ w.T + b."""
    bias = None if b is None else np.ascontiguousarray(b)
    y = dnnl.matmul(_rows(x), np.ascontiguousarray(w), bias, trans_b=True)
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def linear_grad_input(dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dy @ w."""
    return dnnl.matmul(_rows(dy), np.ascontiguousarray(w)).reshape(dy.shape[:-1] + (w.shape[1],))


def linear_grad_weight(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dy.T @ x over all leading dimensions."""
    return dnnl.matmul(_rows(dy), _rows(x), trans_a=True)


def linear_grad_bias(dy: np.ndarray) -> np.ndarray:
    """dy summed over all leading dimensions (NumPy: oneDNN 3.2's reduction runs a reference kernel here)."""
    total: np.ndarray = dy.reshape(-1, dy.shape[-1]).sum(axis=0)
    return total


def _count(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


def _plan(call: Any) -> Any:
    if call.op == "linear":
        x, w = call.shape("input"), call.shape("weight")
        return dnnl.matmul_impl([_count(x), x[-1]], list(w), call.shape("bias") is not None, trans_b=True, dtype=call.dtype)
    dy = call.shape("grad_output")
    if call.op == "linear_grad_input":
        return dnnl.matmul_impl([_count(dy), dy[-1]], list(call.shape("weight")))
    if call.op == "linear_grad_weight":
        x = call.shape("input")
        return dnnl.matmul_impl([_count(dy), dy[-1]], [_count(x), x[-1]], trans_a=True)
    raise ValueError(f"no oneDNN primitive serves {call.op}")


def supports(call: Any) -> bool | str:
    """oneDNN is asked: True if it makes the primitive for this call, else its refusal."""
    return refusal(lambda: _plan(call), call.dtype)


def kernel(call: Any) -> str:
    return str(_plan(call).impl)
