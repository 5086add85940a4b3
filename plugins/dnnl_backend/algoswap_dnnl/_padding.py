"""Non-zero padding modes (reflect, replicate, circular), done in NumPy around zero-padded primitives."""

from __future__ import annotations

import numpy as np

PadHW = tuple[tuple[int, int], tuple[int, int]]
NO_PADDING: PadHW = ((0, 0), (0, 0))
# "zeros_here": zeros, padded in NumPy rather than by the primitive (conv.py says when)
_NUMPY_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap", "zeros_here": "constant"}


def pad(x: np.ndarray, padding: PadHW, mode: str) -> np.ndarray:
    """x padded on H and W in a torch padding mode other than zeros (or zeros, as "zeros_here")."""
    widths = ((0, 0), (0, 0), tuple(padding[0]), tuple(padding[1]))
    padded: np.ndarray = np.pad(x, widths, mode=_NUMPY_MODE[mode])  # type: ignore[call-overload]
    return padded


def _source(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source coordinate each padded coordinate copies."""
    index = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(index, 0, size - 1)
    if mode == "circular":
        return index % size
    period = 2 * (size - 1)
    folded = index % period if period else np.zeros_like(index)
    return np.where(folded < size, folded, period - folded)


def fold(grad: np.ndarray, size_hw: tuple[int, int], padding: PadHW, mode: str) -> np.ndarray:
    """Adjoint of pad: the gradient w.r.t. the padded array summed onto the unpadded one."""
    for axis, size, (before, after) in zip((2, 3), size_hw, padding):
        moved = np.moveaxis(grad, axis, 0)
        out = np.zeros((size,) + moved.shape[1:], dtype=grad.dtype)
        np.add.at(out, _source(size, before, after, mode), moved)
        grad = np.moveaxis(out, 0, axis)
    return np.ascontiguousarray(grad)

