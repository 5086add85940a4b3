"""Reference activation functions and their gradients.

The smooth ones (silu, gelu, elu, mish) are computed in float64 and rounded once to the input's dtype;
they and their gradients give NaN and infinities where PyTorch's float64 kernels do (x * 0 at an
infinite input, for instance), from formulas that neither overflow nor cancel where PyTorch's would.
"""

import math
from typing import Any

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    """Rectified linear unit, max(x, 0) (NaN propagates)."""
    return np.maximum(x, 0)


def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Gradient of relu: 0 where x <= 0, else dy (where x is NaN too, as in PyTorch)."""
    return np.where(x <= 0, 0, dy).astype(dy.dtype, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), computed from exp(-|x|) so that no exp overflows."""
    e = np.exp(-np.abs(x))
    return (np.where(x >= 0, 1, e) / (1 + e)).astype(x.dtype, copy=False)


def sigmoid_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of sigmoid from its output y: dy * y * (1 - y)."""
    return dy * y * (1 - y)


def tanh(x: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent."""
    return np.tanh(x)


def tanh_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of tanh from its output y: dy * (1 - y * y)."""
    return dy * (1 - y * y)


def leaky_relu(x: np.ndarray, *, negative_slope: float) -> np.ndarray:
    """x where x > 0, else negative_slope * x (NaN propagates)."""
    return np.where(x > 0, x, x * x.dtype.type(negative_slope))


def leaky_relu_grad(dy: np.ndarray, x: np.ndarray, *, negative_slope: float) -> np.ndarray:
    """Gradient of leaky_relu: dy where x > 0, else negative_slope * dy."""
    return np.where(x > 0, dy, dy * dy.dtype.type(negative_slope))


def hardtanh(x: np.ndarray, *, min_val: float, max_val: float) -> np.ndarray:
    """x clamped to [min_val, max_val] (NaN stays NaN)."""
    return np.clip(x, x.dtype.type(min_val), x.dtype.type(max_val))


def hardtanh_grad(dy: np.ndarray, x: np.ndarray, *, min_val: float, max_val: float) -> np.ndarray:
    """dy strictly inside (min_val, max_val), else 0 (at the bounds and where x is NaN too, as in PyTorch)."""
    return np.where((x > min_val) & (x < max_val), dy, 0).astype(dy.dtype, copy=False)


def _in_float64(function: Any) -> Any:
    """``function`` computed in float64 and rounded once to the dtype of its first argument."""
    def wide(*arrays: np.ndarray, **attrs: Any) -> np.ndarray:
        out: np.ndarray = function(*(a.astype(np.float64, copy=False) for a in arrays), **attrs)
        return out.astype(arrays[0].dtype, copy=False)

    wide.__name__ = wide.__qualname__ = function.__name__
    wide.__doc__ = function.__doc__
    return wide


@_in_float64
def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return x * sigmoid(x)


@_in_float64
def silu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dy * s * (1 + x * (1 - s)), s = sigmoid(x) (NaN at x = +-inf, as in PyTorch)."""
    s = sigmoid(x)
    return dy * s * (1 + x * (1 - s))


def _erfc(z: np.ndarray) -> np.ndarray:
    """erfc(z) for z >= 0 (or NaN), to a few ulps: 1 - erf(z) from erf's series of positive terms
    below 1 (where erfc(z) > 0.15, so the subtraction loses under a digit), Laplace's continued
    fraction from 1 on (200 levels: converged to the last bit at z = 1, and faster beyond)."""
    out = np.empty_like(z)
    small = z < 1
    s = z[small]
    term, total = s.copy(), s.copy()
    for n in range(1, 25):  # the terms fall below 1e-17 of the sum well before n = 25 for z < 1
        term *= 2 * s * s / (2 * n + 1)
        total += term
    out[small] = 1 - 2 / math.sqrt(math.pi) * np.exp(-s * s) * total
    big = z[~small]  # NaN too: it stays NaN
    with np.errstate(invalid="ignore", over="ignore"):
        fraction = big.copy()
        for level in range(200, 0, -1):
            fraction = big + (level / 2) / fraction
        out[~small] = np.exp(-big * big) / math.sqrt(math.pi) / fraction  # 0 at +inf
    return out


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(-x / sqrt(2)) / 2, from erfc of |x| / sqrt(2): no cancellation for x < 0."""
    tail = _erfc(np.abs(x) / math.sqrt(2)) / 2
    return np.where(x < 0, tail, 1 - tail)


def _tanh_gate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, u): s = (1 + tanh(u)) / 2 = sigmoid(2u) for u = sqrt(2/pi) * (x + 0.044715 x^3), the tanh
    approximation's gate, computed as a sigmoid so that it keeps its digits where tanh(u) is near -1."""
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return sigmoid(2 * u), u


@_in_float64
def gelu(x: np.ndarray, *, approximate: str) -> np.ndarray:
    """x * Phi(x) with Phi from erfc ('none'), or x * (1 + tanh(u)) / 2 ('tanh')."""
    gate = _normal_cdf(x) if approximate == "none" else _tanh_gate(x)[0]
    return x * gate


@_in_float64
def gelu_grad(dy: np.ndarray, x: np.ndarray, *, approximate: str) -> np.ndarray:
    """dy * (Phi(x) + x * phi(x)) ('none'), or the tanh form's derivative, dy * (s + x * s * (1 - s) * 2u'),
    with 1 - tanh(u)^2 = 4 s (1 - s) ('tanh'). NaN at x = +-inf (x times a zero density), as in PyTorch."""
    if approximate == "none":
        return dy * (_normal_cdf(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
    s, _ = _tanh_gate(x)
    slope = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
    return dy * (s + 2 * x * s * (1 - s) * slope)


def hardswish(x: np.ndarray) -> np.ndarray:
    """x * clip(x + 3, 0, 6) / 6 (NaN where x = -inf: -inf * 0, as in PyTorch)."""
    return x * np.clip(x + 3, 0, 6) / 6


def hardswish_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """0 where x <= -3, dy where x >= 3, else dy * (x / 3 + 0.5) (NaN where x is NaN), as PyTorch has it."""
    return np.select([x <= -3, x >= 3], [np.zeros_like(dy), dy], dy * (x / 3 + 0.5)).astype(dy.dtype, copy=False)


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    """clip(x + 3, 0, 6) / 6 (NaN stays NaN)."""
    return np.clip(x + 3, 0, 6) / 6


def hardsigmoid_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dy / 6 where -3 < x < 3, else 0 (where x is NaN too, as in PyTorch)."""
    return np.where((x > -3) & (x < 3), dy / 6, 0).astype(dy.dtype, copy=False)


@_in_float64
def elu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x where x > 0, else alpha * expm1(x)."""
    with np.errstate(over="ignore"):  # expm1 of the large x the other branch takes
        return np.where(x > 0, x, alpha * np.expm1(x))


@_in_float64
def elu_grad(dy: np.ndarray, x: np.ndarray, *, alpha: float) -> np.ndarray:
    """dy where x > 0, else dy * alpha * exp(x) (alpha at x = 0, NaN where x is NaN, as in PyTorch)."""
    with np.errstate(over="ignore"):
        return np.where(x > 0, dy, dy * alpha * np.exp(x))


def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no exp overflows."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


@_in_float64
def mish(x: np.ndarray) -> np.ndarray:
    """x * tanh(softplus(x)) (NaN where x = -inf: -inf * 0, as in PyTorch)."""
    return x * np.tanh(_softplus(x))


@_in_float64
def mish_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dy * (t + x * sigmoid(x) * (1 - t * t)), t = tanh(softplus(x)) (NaN at x = +-inf, as in PyTorch)."""
    t = np.tanh(_softplus(x))
    return dy * (t + x * sigmoid(x) * (1 - t * t))
