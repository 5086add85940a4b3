"""Element-wise activations and their gradients (CuPy element-wise kernels).

The conditions are written so that NaN goes where PyTorch sends it (ternaries, never fmin/fmax,
which drop NaN); ``FORWARD`` holds each activation as C statements on ``T v``, shared with the
convolution epilogue (_epilogue), which fuses some of them.
"""

from __future__ import annotations

from typing import Any

import cupy as cp

SQRT_HALF = "(T)0.70710678118654752"  # 1 / sqrt(2)
INV_SQRT_2PI = "(T)0.39894228040143268"  # 1 / sqrt(2 pi)
TANH_SCALE = "(T)0.79788456080286536"  # sqrt(2 / pi), in the tanh approximation of gelu


def _sigmoid(of: str, into: str = "s") -> str:
    """T s = sigmoid(of), from exp(-|of|) so that it neither overflows nor flushes to 0 before its value does."""
    return f"T {into}_e = exp(-fabs({of})); T {into} = ({of} >= (T)0 ? (T)1 : {into}_e) / ((T)1 + {into}_e);"


def _softplus(of: str) -> str:
    """T sp = log(1 + exp(of)), as max(of, 0) + log1p(exp(-|of|)): no overflow, NaN stays NaN."""
    return f"T sp = log1p(exp(-fabs({of}))) + ({of} > (T)0 ? {of} : (T)0);"


def _tanh_gate(of: str) -> str:
    """T s = (1 + tanh(u)) / 2 = sigmoid(2u), u = sqrt(2/pi) (of + 0.044715 of^3): gelu's tanh form."""
    return f"T u2 = 2 * {TANH_SCALE} * ({of} + (T)0.044715 * {of} * {of} * {of}); {_sigmoid('u2')}"


_CLAMP_3_6 = "T c = v + 3; c = c < (T)0 ? (T)0 : (c > (T)6 ? (T)6 : c);"  # hardtanh(v + 3, 0, 6)
# activation -> C statements turning T v into activation(v) (hardtanh reads the bounds T lo, T hi)
FORWARD = {
    "relu": "if (!(v > (T)0) && v == v) v = (T)0;",
    "hardtanh": "v = v < lo ? lo : (v > hi ? hi : v);",
    "silu": f"{{ {_sigmoid('v')} v = v * s; }}",
    "gelu": f"v = (T)0.5 * v * erfc(-v * {SQRT_HALF});",
    "gelu_tanh": f"{{ {_tanh_gate('v')} v = v * s; }}",
    "hardswish": f"{{ {_CLAMP_3_6} v = v * c / 6; }}",
    "hardsigmoid": f"{{ {_CLAMP_3_6} v = c / 6; }}",
    "elu": "v = v > (T)0 ? v : alpha * expm1(v);",
    "mish": f"{{ {_softplus('v')} v = v * tanh(sp); }}",
}
# activation -> C statements setting T dx from T dy and the forward input T x
BACKWARD = {
    "hardtanh": "dx = (x > lo && x < hi) ? dy : (T)0;",
    "silu": f"{_sigmoid('x')} dx = dy * s * ((T)1 + x * ((T)1 - s));",
    "gelu": f"dx = dy * ((T)0.5 * erfc(-x * {SQRT_HALF}) + x * exp((T)-0.5 * x * x) * {INV_SQRT_2PI});",
    "gelu_tanh": f"{_tanh_gate('x')} dx = dy * (s + 2 * x * s * ((T)1 - s) * {TANH_SCALE} * ((T)1 + (T)0.134145 * x * x));",
    "hardswish": "dx = x <= (T)-3 ? (T)0 : (x >= (T)3 ? dy : dy * (x / 3 + (T)0.5));",
    "hardsigmoid": "dx = (x > (T)-3 && x < (T)3) ? dy / 6 : (T)0;",
    "elu": "dx = x > (T)0 ? dy : dy * alpha * exp(x);",
    "mish": f"{_softplus('x')} T t = tanh(sp); {_sigmoid('x')} dx = dy * (t + x * s * ((T)1 - t * t));",
}
# activation -> its scalar parameters (kernel arguments after the arrays)
PARAMS = {"hardtanh": ("lo", "hi"), "elu": ("alpha",)}


def _forward_kernel(name: str) -> Any:
    params = "".join(f", T {p}" for p in PARAMS.get(name, ()))
    return cp.ElementwiseKernel(f"T x{params}", "T y", f"T v = x; {FORWARD[name]} y = v;", f"algoswap_{name}")


def _backward_kernel(name: str) -> Any:
    params = "".join(f", T {p}" for p in PARAMS.get(name, ()))
    return cp.ElementwiseKernel(f"T dy, T x{params}", "T dx", BACKWARD[name], f"algoswap_{name}_grad")


_relu_grad = cp.ElementwiseKernel("T dy, T x", "T dx", "dx = x <= 0 ? (T)0 : dy", "algoswap_relu_grad")
_leaky = cp.ElementwiseKernel("T x, T slope", "T y", "y = x > 0 ? x : x * slope", "algoswap_leaky_relu")
_leaky_grad = cp.ElementwiseKernel("T dy, T x, T slope", "T dx", "dx = x > 0 ? dy : dy * slope", "algoswap_leaky_relu_grad")
_FORWARD = {name: _forward_kernel(name) for name in BACKWARD}
_BACKWARD = {name: _backward_kernel(name) for name in BACKWARD}


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


def hardtanh(x: Any, *, min_val: float, max_val: float) -> Any:
    return _FORWARD["hardtanh"](x, x.dtype.type(min_val), x.dtype.type(max_val))


def hardtanh_grad(dy: Any, x: Any, *, min_val: float, max_val: float) -> Any:
    return _BACKWARD["hardtanh"](dy, x, x.dtype.type(min_val), x.dtype.type(max_val))


def silu(x: Any) -> Any:
    return _FORWARD["silu"](x)


def silu_grad(dy: Any, x: Any) -> Any:
    return _BACKWARD["silu"](dy, x)


def gelu(x: Any, *, approximate: str) -> Any:
    return _FORWARD["gelu" if approximate == "none" else "gelu_tanh"](x)


def gelu_grad(dy: Any, x: Any, *, approximate: str) -> Any:
    return _BACKWARD["gelu" if approximate == "none" else "gelu_tanh"](dy, x)


def hardswish(x: Any) -> Any:
    return _FORWARD["hardswish"](x)


def hardswish_grad(dy: Any, x: Any) -> Any:
    return _BACKWARD["hardswish"](dy, x)


def hardsigmoid(x: Any) -> Any:
    return _FORWARD["hardsigmoid"](x)


def hardsigmoid_grad(dy: Any, x: Any) -> Any:
    return _BACKWARD["hardsigmoid"](dy, x)


def elu(x: Any, *, alpha: float) -> Any:
    return _FORWARD["elu"](x, x.dtype.type(alpha))


def elu_grad(dy: Any, x: Any, *, alpha: float) -> Any:
    return _BACKWARD["elu"](dy, x, x.dtype.type(alpha))


def mish(x: Any) -> Any:
    return _FORWARD["mish"](x)


def mish_grad(dy: Any, x: Any) -> Any:
    return _BACKWARD["mish"](dy, x)
