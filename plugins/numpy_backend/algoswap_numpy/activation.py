"""Reference activation functions and their gradients."""

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
