"""Reference interpolate and its gradient: gathers (and scatter-adds) of the taps torch reads
(algoswap.interpolation_taps), one axis after the other."""

from __future__ import annotations

from typing import Any

import numpy as np

from algoswap import interpolation_taps

Pair = tuple[int, int]


def _taps(axis: int, size: int, out: int, factors: Any, mode: str, align_corners: Any, dtype: Any,
          gradient: bool = False) -> Any:
    factor = None if factors is None else factors[axis]
    return interpolation_taps(size, out, factor, mode, align_corners, str(dtype), gradient)


def _along(x: np.ndarray, axis: int, taps: Any) -> np.ndarray:
    """x resampled along ``axis`` (2 or 3): a gather (one tap), or w0 * x[i0] + w1 * x[i1] + ... in order."""
    indices, weights = taps
    if indices.shape[1] == 1:
        return np.take(x, indices[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    total = None
    for index, weight in zip(indices.T, weights.T):
        term = weight.reshape(shape).astype(x.dtype) * np.take(x, index, axis=axis)
        total = term if total is None else total + term
    return total


def interpolate(x: np.ndarray, *, size: Pair, scale_factor: Any, mode: str, align_corners: Any,
                recompute_scale_factor: Any) -> np.ndarray:
    for axis in (3, 2):
        x = _along(x, axis, _taps(axis - 2, x.shape[axis], size[axis - 2], scale_factor, mode, align_corners, x.dtype))
    return np.ascontiguousarray(x)


def _scatter(dy: np.ndarray, axis: int, size: int, taps: Any) -> np.ndarray:
    """The adjoint of ``_along``: each entry of dy added to the input entries it was read from, times their weights."""
    indices, weights = taps
    shape = list(dy.shape)
    shape[axis] = size
    dx = np.zeros(shape, dy.dtype)
    moved, grad = np.moveaxis(dx, axis, 0), np.moveaxis(dy, axis, 0)  # views: index the first axis
    if indices.shape[1] == 1:
        np.add.at(moved, indices[:, 0], grad)
        return dx
    stretch = (-1,) + (1,) * (dy.ndim - 1)
    for index, weight in zip(indices.T, weights.T):
        np.add.at(moved, index, weight.reshape(stretch).astype(dy.dtype) * grad)
    return dx


def interpolate_grad(dy: np.ndarray, *, input_size: tuple[int, ...], scale_factor: Any, mode: str,
                     align_corners: Any) -> np.ndarray:
    if mode == "bicubic" and dy.shape[2:] == tuple(input_size[2:]):
        return dy.copy()  # torch's bicubic gradient copies planes of the same size (its forward does not)
    for axis in (2, 3):
        taps = _taps(axis - 2, input_size[axis], dy.shape[axis], scale_factor, mode, align_corners, dy.dtype, True)
        dy = _scatter(dy, axis, input_size[axis], taps)
    return dy
