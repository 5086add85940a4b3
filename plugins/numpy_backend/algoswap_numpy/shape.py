"""Reference shape operators."""

import numpy as np


def flatten(x: np.ndarray, *, start_dim: int, end_dim: int) -> np.ndarray:
    """Merge dimensions start_dim..end_dim (inclusive) into one."""
    if x.ndim == 0:
        return x.reshape(1)
    merged = 1
    for size in x.shape[start_dim:end_dim + 1]:
        merged *= size
    return x.reshape(x.shape[:start_dim] + (merged,) + x.shape[end_dim + 1:])


def reshape(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """The elements of x in row-major order under ``shape`` (canonical: no -1)."""
    return x.reshape(shape)


def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    """Join the inputs along ``axis`` (non-negative, canonical)."""
    return np.concatenate(inputs, axis=axis)
