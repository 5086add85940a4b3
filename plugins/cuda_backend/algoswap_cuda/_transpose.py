"""NCHW <-> NHWC copies of float arrays: a tiled transpose through shared memory, so that both the reads and the
writes run along memory (CuPy's generic strided copy ran at a fraction of the bandwidth: 400 us for one
256x64x112x112 float16 copy on the H200). Each (C, H·W) matrix of an image is transposed in tiles of 1024
elements, TH rows by TW columns (32 x 32; a few rows or columns, such as an image's 3 channels, get a flat tile:
4 x 256), the tile's rows padded by one element against bank conflicts."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._runtime import C_TYPES, dtype_name
from ._types import prelude

_TILE = 1024
TRANSPOSE = r"""
extern "C" __global__ void transpose_tiles(const S* in, S* out, int rows, int cols, int th, int tw) {
    __shared__ S tile[2048];  // th rows of tw + 1 (at most 1024 rows of 2)
    const int across = (cols + tw - 1) / tw, down = (rows + th - 1) / th;
    const long long block = blockIdx.x, matrix = block / ((long long)across * down);
    const int at = (int)(block - matrix * across * down), r0 = at / across * th, c0 = at % across * tw;
    const S* from = in + matrix * rows * cols;
    S* to = out + matrix * rows * cols;
    for (int k = threadIdx.x; k < th * tw; k += blockDim.x) {  // along the input's rows
        const int r = r0 + k / tw, c = c0 + k % tw;
        if (r < rows && c < cols) tile[(k / tw) * (tw + 1) + k % tw] = from[(long long)r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < th * tw; k += blockDim.x) {  // along the output's rows
        const int c = c0 + k / th, r = r0 + k % th;
        if (r < rows && c < cols) to[(long long)c * rows + r] = tile[(k % th) * (tw + 1) + k / th];
    }
}
"""


@lru_cache(maxsize=8)
def _kernel(dtype: str) -> Any:
    return cp.RawKernel(prelude(dtype) + TRANSPOSE, "transpose_tiles")


def _power_of_two_above(size: int) -> int:
    return 1 << max(size - 1, 0).bit_length()


def tile(rows: int, cols: int) -> tuple[int, int]:
    """The tile (TH, TW) of a rows x cols transpose: 1024 elements, few rows or columns whole."""
    if rows < 32:
        th = _power_of_two_above(rows)
        return th, _TILE // th
    if cols < 32:
        tw = _power_of_two_above(cols)
        return _TILE // tw, tw
    return 32, 32


def transpose(matrices: Any, out: Any, rows: int, cols: int) -> None:
    """``out`` (C-contiguous) becomes each rows x cols matrix of ``matrices`` (C-contiguous, the same element count
    and dtype) transposed."""
    count = matrices.size // max(rows * cols, 1)
    if not matrices.size:
        return
    th, tw = tile(rows, cols)
    blocks = count * -(-rows // th) * -(-cols // tw)
    _kernel(dtype_name(matrices.dtype))((blocks,), (256,), (matrices, out, np.int32(rows), np.int32(cols), np.int32(th), np.int32(tw)))


def handles(array: Any) -> bool:
    """Whether these kernels copy ``array``: a 4-D float array (of fewer than 2**31 elements per image)."""
    return array.ndim == 4 and dtype_name(array.dtype) in C_TYPES and array[:1].size < 2**31


def to_channels_last(array: Any) -> Any:
    """A C-contiguous (N, C, H, W) array copied into NHWC memory (returned with NCHW shape)."""
    n, c, h, w = array.shape
    out = cp.empty((n, h, w, c), array.dtype)
    transpose(array, out, c, h * w)
    return out.transpose(0, 3, 1, 2)


def to_contiguous(array: Any) -> Any:
    """An (N, C, H, W) array in NHWC memory copied into a C-contiguous one."""
    n, c, h, w = array.shape
    out = cp.empty(array.shape, array.dtype)
    transpose(array.transpose(0, 2, 3, 1), out, h * w, c)
    return out
