"""maxpool2d and adaptiveavgpool2d to 1 x 1 (the global average pool closing ResNets) on our kernels (float32)."""

from __future__ import annotations

from typing import Any

from algoswap import pool_output_size

from .._device import MpsArray
from . import _launch

Pair = tuple[int, int]
SIMD_WIDTH = 32  # one SIMD-group per plane (kernels/pool.metal: global_avgpool)


def maxpool2d(x: MpsArray, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil_mode: bool) -> MpsArray:
    """One thread per output (kernels/pool.metal: maxpool2d)."""
    n, c, h, w = x.shape
    oh, ow = (pool_output_size(size, k, s, p, d, ceil_mode)
              for size, k, s, p, d in zip((h, w), kernel_size, stride, padding, dilation))
    y = _launch.empty((n, c, oh, ow))
    p = _launch.params("PoolParams", planes=n * c, h=h, w=w, oh=oh, ow=ow, kh=kernel_size[0], kw=kernel_size[1],
                       sh=stride[0], sw=stride[1], ph=padding[0], pw=padding[1], dh=dilation[0], dw=dilation[1])
    _launch.run("maxpool2d", x.tensor, y, p, threads=[y.numel()], group=[256])
    return MpsArray(y)


def adaptiveavgpool2d(x: MpsArray, *, output_size: Pair) -> MpsArray:
    """The mean of each plane: one SIMD-group of 32 threads per plane, summed by simd_sum."""
    n, c, h, w = x.shape
    y = _launch.empty((n, c, 1, 1))
    p = _launch.params("PoolParams", planes=n * c, h=h, w=w, oh=1, ow=1, kh=h, kw=w, sh=1, sw=1, ph=0, pw=0, dh=1, dw=1)
    _launch.run("global_avgpool", x.tensor, y, p, threads=[n * c * SIMD_WIDTH], group=[SIMD_WIDTH])
    return MpsArray(y)


def supports_global(call: Any) -> bool | str:
    if tuple(call.attrs["output_size"]) != (1, 1):
        return f"output_size {call.attrs['output_size']}: the kernel averages whole planes (output_size 1) only"
    return _launch.supports_size(call)

