"""Max, average and adaptive average pooling and their gradients: our CUDA kernels, one thread per
output element, in every float dtype (sums in float32 for float16 and bfloat16); gradients scatter with
atomicAdd into a buffer of the accumulation dtype (float32 for the half types, rounded once)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from . import _kernels
from ._runtime import contiguous
from ._types import accumulation, rounded

Pair = tuple[int, int]


def _planes(x: Any) -> int:
    return int(x.shape[0] * x.shape[1])


def _output(x_shape: tuple[int, ...], out_hw: tuple[int, ...], dtype: Any) -> Any:
    return cp.empty((*x_shape[:2], *out_hw), dtype=dtype)


def _out_hw(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    from algoswap import pool_output_size

    return int(pool_output_size(size, kernel, stride, pad, dilation, ceil_mode))


def maxpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil_mode: bool) -> Any:
    x = contiguous(x)
    out = [_out_hw(x.shape[i + 2], kernel_size[i], stride[i], padding[i], dilation[i], ceil_mode) for i in (0, 1)]
    y = _output(x.shape, tuple(out), x.dtype)
    _kernels.launch(_kernels.MAXPOOL2D, "maxpool2d", x.dtype.name, y.size, (x, y), _planes(x), *x.shape[2:], *out,
                    *kernel_size, *stride, *padding, *dilation)
    return y


def maxpool2d_grad(dy: Any, x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
                   ceil_mode: bool) -> Any:
    """Each output finds its window's maximum again and adds its gradient there."""
    dy, x = contiguous(dy), contiguous(x)
    dx = cp.zeros(x.shape, accumulation(x.dtype))
    _kernels.launch(_kernels.MAXPOOL2D, "maxpool2d_grad", x.dtype.name, dy.size, (dy, x, dx), _planes(x),
                    *x.shape[2:], *dy.shape[2:], *kernel_size, *stride, *padding, *dilation)
    return rounded(dx, x.dtype)


def avgpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None) -> Any:
    x = contiguous(x)
    out = [_out_hw(x.shape[i + 2], kernel_size[i], stride[i], padding[i], 1, ceil_mode) for i in (0, 1)]
    y = _output(x.shape, tuple(out), x.dtype)
    _kernels.launch(_kernels.AVGPOOL2D, "avgpool2d", x.dtype.name, y.size, (x, y), _planes(x), *x.shape[2:], *out,
                    *kernel_size, *stride, *padding, count_include_pad, divisor_override or 0)
    return y


def avgpool2d_grad(dy: Any, *, input_size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    dy = contiguous(dy)
    dx = cp.zeros(tuple(input_size), dtype=accumulation(dy.dtype))
    _kernels.launch(_kernels.AVGPOOL2D, "avgpool2d_grad", dy.dtype.name, dy.size, (dy, dx), _planes(dx),
                    *input_size[2:], *dy.shape[2:], *kernel_size, *stride, *padding, count_include_pad,
                    divisor_override or 0)
    return rounded(dx, dy.dtype)


def adaptiveavgpool2d(x: Any, *, output_size: Pair) -> Any:
    x = contiguous(x)
    out = tuple(x.shape[2 + i] if output_size[i] is None else output_size[i] for i in (0, 1))
    y = _output(x.shape, out, x.dtype)
    _kernels.launch(_kernels.ADAPTIVE, "adaptiveavgpool2d", x.dtype.name, y.size, (x, y), _planes(x), *x.shape[2:], *out)
    return y


def adaptiveavgpool2d_grad(dy: Any, *, input_size: tuple[int, ...]) -> Any:
    dy = contiguous(dy)
    dx = cp.zeros(tuple(input_size), dtype=accumulation(dy.dtype))
    _kernels.launch(_kernels.ADAPTIVE, "adaptiveavgpool2d_grad", dy.dtype.name, dy.size, (dy, dx), _planes(dx),
                    *input_size[2:], *dy.shape[2:])
    return rounded(dx, dy.dtype)


def kernel(call: Any) -> str:
    return f"CuPy raw kernel {call.op} (one thread per output)"
