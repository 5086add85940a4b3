"""slice, split, pad and transpose (a view) on CuPy arrays, and the gradients of slice and pad (pad and its gradient
compute float16 and bfloat16 in float32, rounded once: ``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from ._types import in_float32

Pads = tuple[tuple[int, int], ...]
_CUPY_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _block(begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(b, b + (s - 1) * t + 1 if s else b, t) for b, s, t in zip(begin, size, step))


def slice_(x: Any, *, begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> Any:
    return cp.ascontiguousarray(x[_block(begin, size, step)])


def slice_grad(dy: Any, *, begin: tuple[int, ...], input_size: tuple[int, ...], step: tuple[int, ...]) -> Any:
    grad = cp.zeros(input_size, dtype=dy.dtype)
    grad[_block(begin, dy.shape, step)] = dy
    return grad


def split(x: Any, *, sections: tuple[int, ...], index: int, axis: int) -> Any:
    start = sum(sections[:index])
    return cp.ascontiguousarray(cp.take(x, cp.arange(start, start + sections[index]), axis=axis))


@in_float32
def pad(x: Any, *, pads: Pads, mode: str, value: float) -> Any:
    if mode == "constant":
        return cp.pad(x, pads, mode="constant", constant_values=x.dtype.type(value))
    return cp.pad(x, pads, mode=_CUPY_MODE[mode])


def _sources(size: int, pair: tuple[int, int], mode: str) -> np.ndarray:
    """For each padded position along one axis, the input position it copies (-1: a constant)."""
    positions = np.arange(size)
    if mode == "constant":
        return np.pad(positions, pair, constant_values=-1)
    return np.pad(positions, pair, mode=_CUPY_MODE[mode])


@in_float32
def pad_grad(dy: Any, *, pads: Pads, mode: str, input_size: tuple[int, ...]) -> Any:
    """The adjoint of pad, one axis at a time: each padded position's gradient is added onto the
    input position it copies (a scatter-add on the GPU)."""
    grad = dy
    for axis, (size, pair) in enumerate(zip(input_size, pads)):
        if pair == (0, 0):
            continue
        source = _sources(size, pair, mode)
        keep = np.flatnonzero(source >= 0)
        shape = list(grad.shape)
        shape[axis] = size
        reduced = cp.zeros(shape, dtype=dy.dtype)
        index = (slice(None),) * axis + (cp.asarray(source[keep]),)
        cp.add.at(reduced, index, cp.take(grad, cp.asarray(keep), axis=axis))
        grad = reduced
    return cp.ascontiguousarray(grad)


def transpose(x: Any, *, perm: tuple[int, ...]) -> Any:
    """A view with its strides permuted (registered with layout "any"): the op after it reads it as it is where it
    takes strides (attention's head split), else its runner copies it once, as this did before."""
    return cp.transpose(x, perm)
