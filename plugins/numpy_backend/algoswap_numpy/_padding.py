"""Spatial padding of NCHW arrays and its adjoint (gradient folding)."""

import numpy as np

PadHW = tuple[tuple[int, int], tuple[int, int]]

PAD_MODES = ("zeros", "reflect", "replicate", "circular")


def source_index(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """Map each padded coordinate to the source coordinate it copies (-1 means zero)."""
    idx = np.arange(-before, size + after)
    if mode == "zeros":
        return np.where((idx >= 0) & (idx < size), idx, -1)
    if mode == "replicate":
        return np.clip(idx, 0, size - 1)
    if mode == "circular":
        return idx % size
    if mode == "reflect":
        if size == 1:
            return np.zeros_like(idx)
        period = 2 * (size - 1)
        folded = idx % period
        return np.where(folded < size, folded, period - folded)
    raise ValueError(f"unknown padding mode {mode!r}")


def _is_zero(padding: PadHW) -> bool:
    return not any(padding[0]) and not any(padding[1])


def pad_hw(x: np.ndarray, padding: PadHW, mode: str) -> np.ndarray:
    """Pad the last two axes of x by ((top, bottom), (left, right)) in the given mode."""
    if _is_zero(padding):
        return x
    (top, bottom), (left, right) = padding
    if mode == "zeros":
        widths = ((0, 0),) * (x.ndim - 2) + ((top, bottom), (left, right))
        return np.pad(x, widths)
    rows = source_index(x.shape[-2], top, bottom, mode)
    cols = source_index(x.shape[-1], left, right, mode)
    return np.take(np.take(x, rows, axis=-2), cols, axis=-1)


def _fold_axis(g: np.ndarray, src: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Sum the slices of g along `axis` into the source positions given by src."""
    moved = np.moveaxis(g, axis, 0)
    keep = src >= 0
    out = np.zeros((size,) + moved.shape[1:], dtype=g.dtype)
    np.add.at(out, src[keep], moved[keep])
    return np.moveaxis(out, 0, axis)


def unpad_hw_grad(g: np.ndarray, size_hw: tuple[int, int], padding: PadHW, mode: str) -> np.ndarray:
    """Adjoint of pad_hw: fold a gradient w.r.t. the padded array onto the unpadded one."""
    (top, bottom), (left, right) = padding
    height, width = size_hw
    if mode == "zeros" or _is_zero(padding):
        return np.ascontiguousarray(g[..., top:top + height, left:left + width])
    rows = source_index(height, top, bottom, mode)
    cols = source_index(width, left, right, mode)
    folded = _fold_axis(g, rows, height, g.ndim - 2)
    return np.ascontiguousarray(_fold_axis(folded, cols, width, g.ndim - 1))
