"""relu, sigmoid, tanh and leaky_relu and their gradients on the oneDNN eltwise primitives (any
shape, seen as one flat array). sigmoid and tanh gradients read the forward output
(eltwise_*_use_dst_for_bwd); relu and leaky_relu gradients the forward input."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from ._layout import elementwise

# op -> (oneDNN eltwise kind, the attribute giving alpha)
_KINDS = {"relu": ("relu", None), "sigmoid": ("logistic", None), "tanh": ("tanh", None),
          "leaky_relu": ("relu", "negative_slope")}


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0) (in x's memory order: channels-last stays channels-last)."""
    return elementwise(dnnl.relu, x)


def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dy where x > 0, else 0."""
    return dnnl.relu_grad(np.ascontiguousarray(dy), np.ascontiguousarray(x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)): eltwise_logistic."""
    return dnnl.eltwise(np.ascontiguousarray(x), "logistic")


def sigmoid_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dy * y * (1 - y) from the forward output y: eltwise_logistic_use_dst_for_bwd."""
    return dnnl.eltwise_grad(np.ascontiguousarray(dy), np.ascontiguousarray(y), "logistic")


def tanh(x: np.ndarray) -> np.ndarray:
    """eltwise_tanh."""
    return dnnl.eltwise(np.ascontiguousarray(x), "tanh")


def tanh_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dy * (1 - y * y) from the forward output y: eltwise_tanh_use_dst_for_bwd."""
    return dnnl.eltwise_grad(np.ascontiguousarray(dy), np.ascontiguousarray(y), "tanh")


def leaky_relu(x: np.ndarray, *, negative_slope: float) -> np.ndarray:
    """x where x > 0, else negative_slope * x: eltwise_relu with alpha = negative_slope."""
    return dnnl.eltwise(np.ascontiguousarray(x), "relu", negative_slope)


def leaky_relu_grad(dy: np.ndarray, x: np.ndarray, *, negative_slope: float) -> np.ndarray:
    """dy where x > 0, else negative_slope * dy."""
    return dnnl.eltwise_grad(np.ascontiguousarray(dy), np.ascontiguousarray(x), "relu", negative_slope)


def supports_relu(call: Any) -> bool | str:
    """float32 always; bfloat16 where this CPU has a bf16 eltwise kernel."""
    if call.dtype != "bfloat16" or 0 in call.out_shape:
        return True
    return refusal(lambda: dnnl.eltwise_impl(int(np.prod(call.out_shape)), "relu", 0.0, dtype="bfloat16"), call.dtype)


def kernel(call: Any) -> str:
    size = int(np.prod(call.out_shape, dtype=np.int64))
    if size == 0:
        return "none (empty array)"
    grad = call.op.endswith("_grad")
    kind, alpha_attr = _KINDS[call.op[: -len("_grad")] if grad else call.op]
    alpha = 0.0 if alpha_attr is None else float(call.attrs[alpha_attr])
    if grad:
        return str(dnnl.eltwise_grad_impl(size, kind, alpha).impl)
    return str(dnnl.eltwise_impl(size, kind, alpha, dtype=call.dtype).impl)
