"""Element-wise activations and their gradients (CuPy element-wise kernels)."""

from __future__ import annotations

from typing import Any

import cupy as cp

_relu_grad = cp.ElementwiseKernel("T dy, T x", "T dx", "dx = x <= 0 ? (T)0 : dy", "algoswap_relu_grad")
_leaky = cp.ElementwiseKernel("T x, T slope", "T y", "y = x > 0 ? x : x * slope", "algoswap_leaky_relu")
_leaky_grad = cp.ElementwiseKernel("T dy, T x, T slope", "T dx", "dx = x > 0 ? dy : dy * slope", "algoswap_leaky_relu_grad")


def relu(x: Any) -> Any:
    return cp.maximum(x, 0)


def relu_grad(dy: Any, x: Any) -> Any:
    """0 where x <= 0, else dy (where x is NaN too, as in PyTorch)."""
    return _relu_grad(dy, x)


def sigmoid(x: Any) -> Any:
    return 1 / (1 + cp.exp(-x))


def sigmoid_grad(dy: Any, y: Any) -> Any:
    return dy * y * (1 - y)


def tanh(x: Any) -> Any:
    return cp.tanh(x)


def tanh_grad(dy: Any, y: Any) -> Any:
    return dy * (1 - y * y)


def leaky_relu(x: Any, *, negative_slope: float) -> Any:
    return _leaky(x, x.dtype.type(negative_slope))


def leaky_relu_grad(dy: Any, x: Any, *, negative_slope: float) -> Any:
    return _leaky_grad(dy, x, x.dtype.type(negative_slope))
