"""Sums, means and maxima over axes with their gradients, broadcast_to and its adjoint sum_to_shape (CuPy reductions).

float16 and bfloat16 sums and means accumulate in float32 (asked for explicitly: CuPy's CUB path would add
half-precision arrays in half precision) and are rounded once; the gradients of the mean and the maximum
run in float32 (``_types.in_float32``: a count rounded to bfloat16 is off from 257 on)."""

from __future__ import annotations

import math
from typing import Any

import cupy as cp

from ._types import accumulation, in_float32, rounded

Axes = tuple[int, ...]


def _whole(a: Any) -> Any:
    """``a`` C-contiguous, with its shape: cupy.ascontiguousarray, as NumPy's, makes a 0-d array 1-d."""
    return cp.ascontiguousarray(a).reshape(a.shape)


def total(x: Any, axis: Any, keepdims: bool = False) -> Any:
    """x summed over ``axis`` in its accumulation dtype (float32 for the half types), in x's dtype."""
    return rounded(cp.sum(x, axis=axis, keepdims=keepdims, dtype=accumulation(x.dtype)), x.dtype)


def reduce_sum(x: Any, *, axes: Axes, keepdims: bool) -> Any:
    return total(x, axes, keepdims)


def reduce_mean(x: Any, *, axes: Axes, keepdims: bool) -> Any:
    return rounded(cp.mean(x, axis=axes, keepdims=keepdims, dtype=accumulation(x.dtype)), x.dtype)


def reduce_max(x: Any, *, axes: Axes, keepdims: bool) -> Any:
    """NaN wherever a NaN is among the reduced elements (cupy.max propagates it, as torch.amax does)."""
    return cp.max(x, axis=axes, keepdims=keepdims)


def _spread(dy: Any, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> Any:
    """dy with the reduced axes put back (size 1), broadcast to input_size (a copy)."""
    reduced = {a % len(input_size) for a in axes}
    kept = dy.reshape(tuple(1 if a in reduced else size for a, size in enumerate(input_size)))
    return _whole(cp.broadcast_to(kept, input_size))


def reduce_sum_grad(dy: Any, *, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> Any:
    return _spread(dy, axes, keepdims, input_size)


@in_float32
def reduce_mean_grad(dy: Any, *, axes: Axes, keepdims: bool, input_size: tuple[int, ...]) -> Any:
    count = math.prod(input_size[a] for a in axes)
    return _spread(dy / dy.dtype.type(count), axes, keepdims, input_size)


@in_float32
def reduce_max_grad(dy: Any, x: Any, *, axes: Axes, keepdims: bool) -> Any:
    """torch.amax's gradient: (dy / count) * is_max, count the elements equal to the maximum (0 where it is NaN)."""
    is_max = (x == cp.max(x, axis=axes, keepdims=True)).astype(x.dtype)
    count = cp.sum(is_max, axis=axes, keepdims=True)
    kept = dy if keepdims else cp.expand_dims(dy, axes)
    return _whole((kept / count) * is_max)


def broadcast_to(x: Any, *, shape: tuple[int, ...]) -> Any:
    return _whole(cp.broadcast_to(x, shape))


def sum_to_shape(x: Any, *, shape: tuple[int, ...]) -> Any:
    """x summed over the leading axes ``shape`` lacks and the axes where ``shape`` has size 1."""
    lead = x.ndim - len(shape)
    stretched = tuple(lead + d for d, size in enumerate(shape) if size == 1 and x.shape[lead + d] != 1)
    if not (lead or stretched):
        return _whole(x)
    return total(x, tuple(range(lead)) + stretched, keepdims=True).reshape(shape)
