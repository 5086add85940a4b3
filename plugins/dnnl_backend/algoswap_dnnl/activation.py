"""Activations and their gradients on the oneDNN eltwise primitives (any shape, seen as one flat
array). sigmoid and tanh gradients read the forward output (eltwise_*_use_dst_for_bwd); the others
the forward input. The forward ops of the activations PyTorch's models use (relu, hardtanh, silu,
gelu, hardswish, hardsigmoid, elu, mish) run 4-D arrays in the memory order they come in.

Where oneDNN 3.2 differs from PyTorch on NaN or infinities, the extension fixes the elements
(src/eltwise.cpp). What it leaves: silu's and elu's gradients come out NaN where grad_output is
infinite and the float32 slope flushes to 0 (0 * inf), below x = -87, as PyTorch's float32 kernels
do; gelu's tanh form's gradient is NaN beyond |x| = 1e12 (x**3 overflows), as PyTorch's float32
one is. hardswish_grad, hardsigmoid_grad and mish_grad are not offered (see the backend's
registration).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._ext import dnnl, refusal
from ._layout import elementwise

Eltwise = tuple[str, float, float]  # oneDNN's kind, alpha, beta
# op -> its eltwise (kind, alpha, beta) from its attributes
_KINDS: dict[str, Callable[[dict[str, Any]], Eltwise]] = {
    "relu": lambda a: ("relu", 0.0, 0.0), "sigmoid": lambda a: ("logistic", 0.0, 0.0), "tanh": lambda a: ("tanh", 0.0, 0.0),
    "leaky_relu": lambda a: ("relu", a["negative_slope"], 0.0),
    "hardtanh": lambda a: ("clip_v2", a["min_val"], a["max_val"]), "silu": lambda a: ("swish", 1.0, 0.0),
    "gelu": lambda a: ("gelu_erf" if a["approximate"] == "none" else "gelu_tanh", 0.0, 0.0),
    "hardswish": lambda a: ("hardswish", 1 / 6, 0.5), "hardsigmoid": lambda a: ("hardsigmoid", 1 / 6, 0.5),
    "elu": lambda a: ("elu", a["alpha"], 0.0), "mish": lambda a: ("mish", 0.0, 0.0),
}


def _forward(op: str, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """``op`` on x's memory in its order (channels-last stays channels-last)."""
    kind, alpha, beta = _KINDS[op](attrs)
    return elementwise(lambda a: dnnl.eltwise(a, kind, alpha, beta), x)


def _backward(op: str, dy: np.ndarray, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    kind, alpha, beta = _KINDS[op](attrs)
    return dnnl.eltwise_grad(np.ascontiguousarray(dy), np.ascontiguousarray(x), kind, alpha, beta)


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


def hardtanh(x: np.ndarray, *, min_val: float, max_val: float) -> np.ndarray:
    """eltwise_clip_v2 to [min_val, max_val] (NaN restored)."""
    return _forward("hardtanh", x, {"min_val": min_val, "max_val": max_val})


def hardtanh_grad(dy: np.ndarray, x: np.ndarray, *, min_val: float, max_val: float) -> np.ndarray:
    """dy where min_val < x < max_val, else 0: clip_v2 backward (0 selected, not multiplied, where dy is not finite)."""
    return _backward("hardtanh", dy, x, {"min_val": min_val, "max_val": max_val})


def silu(x: np.ndarray) -> np.ndarray:
    """eltwise_swish with alpha 1."""
    return _forward("silu", x, {})


def silu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _backward("silu", dy, x, {})


def gelu(x: np.ndarray, *, approximate: str) -> np.ndarray:
    """eltwise_gelu_erf ('none'; x itself from x = 8 on) or eltwise_gelu_tanh ('tanh')."""
    return _forward("gelu", x, {"approximate": approximate})


def gelu_grad(dy: np.ndarray, x: np.ndarray, *, approximate: str) -> np.ndarray:
    return _backward("gelu", dy, x, {"approximate": approximate})


def hardswish(x: np.ndarray) -> np.ndarray:
    """eltwise_hardswish of x / 6 + 1/2."""
    return _forward("hardswish", x, {})


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    """eltwise_hardsigmoid of x / 6 + 1/2 (NaN restored)."""
    return _forward("hardsigmoid", x, {})


def elu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    return _forward("elu", x, {"alpha": alpha})


def elu_grad(dy: np.ndarray, x: np.ndarray, *, alpha: float) -> np.ndarray:
    """elu backward (NaN restored where x is NaN)."""
    return _backward("elu", dy, x, {"alpha": alpha})


def mish(x: np.ndarray) -> np.ndarray:
    return _forward("mish", x, {})


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
    kind, alpha, beta = _KINDS[call.op[: -len("_grad")] if grad else call.op](dict(call.attrs))
    if grad:
        return str(dnnl.eltwise_grad_impl(size, kind, alpha, beta).impl)
    return str(dnnl.eltwise_impl(size, kind, alpha, dtype=call.dtype, beta=beta).impl)
