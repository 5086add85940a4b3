"""Reference elementwise arithmetic (NumPy broadcasting), scalar-constant ops and their gradients."""

import numpy as np

from .reduce import sum_to_shape


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.subtract(a, b)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.multiply(a, b)


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b)


def sub_grad_b(dy: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """-dy summed down to b's shape."""
    return np.negative(sum_to_shape(dy, shape=shape))


def mul_grad(dy: np.ndarray, other: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """dy * other summed down to the operand's shape."""
    return sum_to_shape(dy * other, shape=shape)


def div_grad_a(dy: np.ndarray, b: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """dy / b summed down to a's shape."""
    return sum_to_shape(dy / b, shape=shape)


def div_grad_b(dy: np.ndarray, a: np.ndarray, b: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """-dy * a / b**2 summed down to b's shape."""
    return sum_to_shape(-dy * a / (b * b), shape=shape)


def neg(x: np.ndarray) -> np.ndarray:
    return np.negative(x)


def sqrt(x: np.ndarray) -> np.ndarray:
    return np.sqrt(x)


def sqrt_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dy / (2 y) from the output y = sqrt(x)."""
    return dy / (2 * y)


def rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def rsqrt_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """-dy * y**3 / 2 from the output y = x**-0.5."""
    return dy * (y * y * y) * y.dtype.type(-0.5)


def add_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    return x + x.dtype.type(value)


def mul_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    return x * x.dtype.type(value)


def rdiv_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    """value / x."""
    return x.dtype.type(value) / x


def rdiv_scalar_grad(dy: np.ndarray, x: np.ndarray, *, value: float) -> np.ndarray:
    """-dy * value / x**2."""
    return dy * (x.dtype.type(-value) / (x * x))


def _power(x: np.ndarray, exponent: float) -> np.ndarray:
    """x ** exponent; exponent -0.5 as PyTorch computes it, 1 / sqrt(x) (NaN for -inf, where C's
    pow gives 0)."""
    if exponent == -0.5:
        return rsqrt(x)
    return np.power(x, x.dtype.type(exponent))


def pow_scalar(x: np.ndarray, *, exponent: float) -> np.ndarray:
    return _power(x, exponent)


def pow_scalar_grad(dy: np.ndarray, x: np.ndarray, *, exponent: float) -> np.ndarray:
    """dy * exponent * x**(exponent - 1)."""
    return dy * x.dtype.type(exponent) * _power(x, exponent - 1)


def clamp_min(x: np.ndarray, *, value: float) -> np.ndarray:
    """max(x, value); NaN stays NaN."""
    return np.maximum(x, x.dtype.type(value))


def clamp_min_grad(dy: np.ndarray, x: np.ndarray, *, value: float) -> np.ndarray:
    """dy where x >= value, else 0."""
    return np.where(x >= x.dtype.type(value), dy, dy.dtype.type(0))


def zeros_like(x: np.ndarray) -> np.ndarray:
    return np.zeros_like(x)


def ones_like(x: np.ndarray) -> np.ndarray:
    return np.ones_like(x)
