"""Padding and im2col on the GPU as one gather through an index map, and their adjoints as one
scatter-add. Index maps are made with NumPy once per geometry and kept on the device; position
``size`` of a flattened image (one past its end) stands for a zero."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp

from ._types import accumulation, rounded
import numpy as np

PadHW = tuple[tuple[int, int], tuple[int, int]]
Pair = tuple[int, int]
_NUMPY_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _source(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each padded coordinate, the input coordinate it reads (-1: a zero)."""
    coords = np.arange(size)
    if mode == "zeros":
        return np.pad(coords, (before, after), constant_values=-1)
    padded: np.ndarray = np.pad(coords, (before, after), mode=_NUMPY_MODE[mode])  # type: ignore[call-overload]
    return padded


def _spatial(hw: Pair, padding: PadHW, mode: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Flat input positions read at padded rows x cols (hw[0] * hw[1] where a zero is read)."""
    r = _source(hw[0], *padding[0], mode)[rows]
    q = _source(hw[1], *padding[1], mode)[cols]
    flat = r[:, None] * hw[1] + q[None, :]
    return np.where((r[:, None] >= 0) & (q[None, :] >= 0), flat, hw[0] * hw[1])


def _device(index: np.ndarray) -> Any:
    dtype = np.int32 if index.max(initial=0) < 2**31 - 1 else np.int64
    return cp.asarray(index.astype(dtype))


@lru_cache(maxsize=256)
def padding_index(hw: Pair, padding: PadHW, mode: str) -> Any:
    padded = (hw[0] + sum(padding[0]), hw[1] + sum(padding[1]))
    return _device(_spatial(hw, padding, mode, np.arange(padded[0]), np.arange(padded[1])))


@lru_cache(maxsize=256)
def columns_index(chw: tuple[int, int, int], kernel: Pair, out: Pair, stride: Pair, dilation: Pair,
                  padding: PadHW, mode: str) -> Any:
    """(C*KH*KW, OH*OW) flat positions in a (C*H*W + 1)-long image: row (c, i, j), column (y, x)
    reads input (c, y*sh + i*dh - top, x*sw + j*dw - left) or the zero at C*H*W."""
    c, h, w = chw
    rows = (np.arange(kernel[0]) * dilation[0])[:, None] + (np.arange(out[0]) * stride[0])[None, :]
    cols = (np.arange(kernel[1]) * dilation[1])[:, None] + (np.arange(out[1]) * stride[1])[None, :]
    spatial = _spatial((h, w), padding, mode, rows.ravel(), cols.ravel())
    spatial = spatial.reshape(kernel[0], out[0], kernel[1], out[1]).transpose(0, 2, 1, 3)
    zero = spatial == h * w
    index = np.arange(c)[:, None, None, None, None] * (h * w) + spatial[None]
    index = np.where(zero[None], c * h * w, index)
    return _device(index.reshape(c * kernel[0] * kernel[1], out[0] * out[1]))


def with_zero(x: Any) -> Any:
    """(N, rest...) as (N, prod(rest) + 1) with a zero appended to each row."""
    rows = x.reshape(x.shape[0], -1)
    return cp.concatenate([rows, cp.zeros((x.shape[0], 1), dtype=x.dtype)], axis=1)


def gather(x: Any, index: Any) -> Any:
    """Rows of x (with their appended zero) read at ``index``: shape (N,) + index.shape."""
    return with_zero(x)[:, index]


def scatter(values: Any, index: Any, size: int) -> Any:
    """The adjoint of gather: (N, size) sums of ``values`` (N,) + index.shape at ``index`` (the half precisions
    summed in float32: cupy.add.at takes no bfloat16)."""
    out = cp.zeros((values.shape[0], size + 1), dtype=accumulation(values.dtype))
    cp.add.at(out, (slice(None), index), values.astype(out.dtype, copy=False))
    return rounded(out[:, :size], values.dtype)


def pad(x: Any, padding: PadHW, mode: str) -> Any:
    """x (N, C, H, W) padded in H and W (any of the four modes)."""
    n, c, h, w = x.shape
    index = padding_index((h, w), padding, mode)
    return gather(x.reshape(n * c, h * w), index).reshape(n, c, *index.shape)


def unpad(g: Any, hw: Pair, padding: PadHW, mode: str) -> Any:
    """The gradient of pad: g (N, C, Hp, Wp) folded back onto (N, C, H, W)."""
    n, c = g.shape[:2]
    index = padding_index(hw, padding, mode)
    return scatter(g.reshape(n * c, -1).reshape(n * c, *index.shape), index, hw[0] * hw[1]).reshape(n, c, *hw)
