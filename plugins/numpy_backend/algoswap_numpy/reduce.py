"""Reference reductions (sum, mean, max) with their gradients, broadcast_to and its adjoint sum_to_shape."""

import math

import numpy as np

Axes = tuple[int, ...]


def reduce_sum(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    return np.asarray(np.sum(x, axis=axes, keepdims=keepdims), dtype=x.dtype)


def reduce_mean(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    return np.asarray(np.mean(x, axis=axes, keepdims=keepdims), dtype=x.dtype)


def reduce_max(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    """NaN wherever a NaN is among the reduced elements (numpy.max propagates it, as torch.amax does)."""
    return np.asarray(np.max(x, axis=axes, keepdims=keepdims), dtype=x.dtype)


def _spread(dy: np.ndarray, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> np.ndarray:
    """dy with the reduced axes put back (size 1), broadcast to input_size (a copy)."""
    kept = dy if keepdims else np.expand_dims(dy, axes)
    return np.array(np.broadcast_to(kept, input_size))


def reduce_sum_grad(dy: np.ndarray, *, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> np.ndarray:
    return _spread(dy, axes, keepdims, input_size)


def reduce_mean_grad(dy: np.ndarray, *, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> np.ndarray:
    count = math.prod(input_size[a] for a in axes)
    return _spread(dy, axes, keepdims, input_size) / dy.dtype.type(count)


def reduce_max_grad(dy: np.ndarray, x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    """torch.amax's gradient: (dy / count) * is_max, count the number of elements equal to the maximum
    (0 where it is NaN, which makes the whole reduced block NaN, as in torch)."""
    is_max = (x == np.max(x, axis=axes, keepdims=True)).astype(x.dtype)
    count = np.sum(is_max, axis=axes, keepdims=True)
    kept = dy if keepdims else np.expand_dims(dy, axes)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((kept / count) * is_max, dtype=x.dtype)


def broadcast_to(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    return np.array(np.broadcast_to(x, shape))


def sum_to_shape(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    """x summed over the leading axes ``shape`` lacks and the axes where ``shape`` has size 1."""
    lead = x.ndim - len(shape)
    stretched = tuple(lead + d for d, size in enumerate(shape) if size == 1 and x.shape[lead + d] != 1)
    summed = np.sum(x, axis=tuple(range(lead)) + stretched, keepdims=True) if lead or stretched else x
    return np.array(summed.reshape(shape), dtype=x.dtype)
