"""Reference interpolate and its gradient: gathers (and scatter-adds) of the taps torch reads
(algoswap.interpolation_taps), one axis after the other."""

from __future__ import annotations

from typing import Any

import numpy as np

from algoswap import interpolation_taps

Pair = tuple[int, int]


def _taps(axis: int, size: int, out: int, factors: Any, mode: str, align_corners: Any, dtype: Any) -> Any:
    return interpolation_taps(size, out, None if factors is None else factors[axis], mode, align_corners, str(dtype))


def _along(x: np.ndarray, axis: int, taps: Any, mode: str) -> np.ndarray:
    """x resampled along ``axis`` (2 or 3): a gather (nearest), or w0 * x[first] + w1 * x[second]."""
    first, second, w0, w1 = taps
    if mode == "nearest":
        return np.take(x, first, axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    weight0, weight1 = (w.reshape(shape).astype(x.dtype) for w in (w0, w1))
    return weight0 * np.take(x, first, axis=axis) + weight1 * np.take(x, second, axis=axis)


def interpolate(x: np.ndarray, *, size: Pair, scale_factor: Any, mode: str, align_corners: Any,
                recompute_scale_factor: Any) -> np.ndarray:
    for axis in (3, 2):
        taps = _taps(axis - 2, x.shape[axis], size[axis - 2], scale_factor, mode, align_corners, x.dtype)
        x = _along(x, axis, taps, mode)
    return np.ascontiguousarray(x)


def _scatter(dy: np.ndarray, axis: int, size: int, taps: Any, mode: str) -> np.ndarray:
    """The adjoint of ``_along``: each entry of dy added to the input entries it was read from, times their weights."""
    first, second, w0, w1 = taps
    shape = list(dy.shape)
    shape[axis] = size
    dx = np.zeros(shape, dy.dtype)
    moved, grad = np.moveaxis(dx, axis, 0), np.moveaxis(dy, axis, 0)  # views: index the first axis
    if mode == "nearest":
        np.add.at(moved, first, grad)
        return dx
    stretch = (-1,) + (1,) * (dy.ndim - 1)
    np.add.at(moved, first, w0.reshape(stretch).astype(dy.dtype) * grad)
    np.add.at(moved, second, w1.reshape(stretch).astype(dy.dtype) * grad)
    return dx


def interpolate_grad(dy: np.ndarray, *, input_size: tuple[int, ...], scale_factor: Any, mode: str,
                     align_corners: Any) -> np.ndarray:
    for axis in (2, 3):
        taps = _taps(axis - 2, input_size[axis], dy.shape[axis], scale_factor, mode, align_corners, dy.dtype)
        dy = _scatter(dy, axis, input_size[axis], taps, mode)
    return dy
