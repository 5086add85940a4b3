"""Reference activation functions."""

import numpy as np


def relu(x: np.ndarray) -> np.ndarray:
    """Rectified linear unit, max(x, 0) (NaN propagates)."""
    return np.maximum(x, 0)


def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Gradient of relu: dy where x > 0, else 0."""
    return np.where(x > 0, dy, 0).astype(dy.dtype, copy=False)
