"""Reference inference batch normalisation (NCHW)."""

import numpy as np


def batchnorm2d(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray,
                weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias, per channel (dimension 1)."""
    scale = 1.0 / np.sqrt(running_var + x.dtype.type(eps))
    if weight is not None:
        scale = scale * weight
    y = (x - running_mean[:, None, None]) * scale[:, None, None]
    if bias is not None:
        y += bias[:, None, None]
    return y
