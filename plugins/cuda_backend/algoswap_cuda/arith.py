"""Element-wise arithmetic (CuPy broadcasting), the scalar-constant ops and their gradients.

In float16 and bfloat16 the binary ops, neg and sqrt are CuPy's element-wise kernels on the arrays as they
are (each computes in float32 and rounds once; their gradients' sums accumulate in float32); the others
compute in float32, rounded once (``_types.in_float32``: a scalar constant is not rounded to the half type
first, as in torch). The forward ops keep a channels-last input's memory order (``_order``)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from ._order import binary, keeps_order
from ._types import in_float32
from .reduce import sum_to_shape


def sub(a: Any, b: Any) -> Any:
    return binary("sub", a, b)


def mul(a: Any, b: Any) -> Any:
    return binary("mul", a, b)


def div(a: Any, b: Any) -> Any:
    return binary("div", a, b)


def sub_grad_b(dy: Any, *, shape: tuple[int, ...]) -> Any:
    return -sum_to_shape(dy, shape=shape)


def mul_grad(dy: Any, other: Any, *, shape: tuple[int, ...]) -> Any:
    return sum_to_shape(dy * other, shape=shape)


def div_grad_a(dy: Any, b: Any, *, shape: tuple[int, ...]) -> Any:
    return sum_to_shape(dy / b, shape=shape)


@in_float32
def div_grad_b(dy: Any, a: Any, b: Any, *, shape: tuple[int, ...]) -> Any:
    return sum_to_shape(_div_grad_b(dy, a, b), shape=shape)


_div_grad_b = cp.ElementwiseKernel("T dy, T a, T b", "T g", "g = -dy * a / (b * b)", "algoswap_div_grad_b")
_sqrt_grad = cp.ElementwiseKernel("T dy, T y", "T dx", "dx = dy / (2 * y)", "algoswap_sqrt_grad")
_rsqrt = cp.ElementwiseKernel("T x", "T y", "y = 1 / sqrt(x)", "algoswap_rsqrt")
_rsqrt_grad = cp.ElementwiseKernel("T dy, T y", "T dx", "dx = dy * (y * y * y) * (T)-0.5", "algoswap_rsqrt_grad")
_rdiv_grad = cp.ElementwiseKernel("T dy, T x, T value", "T dx", "dx = dy * (-value / (x * x))", "algoswap_rdiv_grad")
# x ** e as PyTorch (and NumPy) compute it: e = 0.5 is sqrt(x) and e = -0.5 is 1 / sqrt(x), NaN for
# x = -inf (where C's pow gives +inf and 0)
_clamp_min = cp.ElementwiseKernel("T x, T value", "T y", "y = x < value ? value : x", "algoswap_clamp_min")  # NaN stays NaN
_clamp_min_grad = cp.ElementwiseKernel("T dy, T x, T value", "T dx", "dx = x >= value ? dy : (T)0", "algoswap_clamp_min_grad")
_POWER = """
template <typename F> __device__ F algoswap_power(F x, F e) {
    return e == (F)0.5 ? sqrt(x) : e == (F)-0.5 ? (F)1 / sqrt(x) : pow(x, e);
}
"""
_pow = cp.ElementwiseKernel("T x, T exponent", "T y", "y = algoswap_power(x, exponent)", "algoswap_pow", preamble=_POWER)
_pow_grad = cp.ElementwiseKernel("T dy, T x, T exponent", "T dx", "dx = dy * exponent * algoswap_power(x, exponent - 1)",
                                 "algoswap_pow_grad", preamble=_POWER)


@keeps_order
def neg(x: Any) -> Any:
    return -x


@keeps_order
def sqrt(x: Any) -> Any:
    return cp.sqrt(x)


@in_float32
def sqrt_grad(dy: Any, y: Any) -> Any:
    return _sqrt_grad(dy, y)


@keeps_order
@in_float32
def rsqrt(x: Any) -> Any:
    return _rsqrt(x)


@in_float32
def rsqrt_grad(dy: Any, y: Any) -> Any:
    return _rsqrt_grad(dy, y)


@keeps_order
@in_float32
def add_scalar(x: Any, *, value: float) -> Any:
    return x + x.dtype.type(value)


@keeps_order
@in_float32
def mul_scalar(x: Any, *, value: float) -> Any:
    return x * x.dtype.type(value)


@keeps_order
@in_float32
def rdiv_scalar(x: Any, *, value: float) -> Any:
    return x.dtype.type(value) / x


@in_float32
def rdiv_scalar_grad(dy: Any, x: Any, *, value: float) -> Any:
    return _rdiv_grad(dy, x, x.dtype.type(value))


@keeps_order
@in_float32
def pow_scalar(x: Any, *, exponent: float) -> Any:
    return _pow(x, x.dtype.type(exponent))


@in_float32
def pow_scalar_grad(dy: Any, x: Any, *, exponent: float) -> Any:
    """dy * exponent * x ** (exponent - 1); for exponent 0, zeros whatever dy and x hold (as in PyTorch)."""
    if exponent == 0:
        return cp.zeros_like(x)
    return _pow_grad(dy, x, x.dtype.type(exponent))


@keeps_order
@in_float32
def clamp_min(x: Any, *, value: float) -> Any:
    return _clamp_min(x, x.dtype.type(value))


@in_float32
def clamp_min_grad(dy: Any, x: Any, *, value: float) -> Any:
    return _clamp_min_grad(dy, x, x.dtype.type(value))


def zeros_like(x: Any) -> Any:
    return cp.zeros_like(x)


def ones_like(x: Any) -> Any:
    return cp.ones_like(x)
