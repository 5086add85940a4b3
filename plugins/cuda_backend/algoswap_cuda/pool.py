"""Max, average and adaptive average pooling and their gradients: our CUDA kernels (``_pool_kernels``), in every
float dtype (sums in float32 for float16 and bfloat16). The forward poolings take any memory order: a channels-last
input (NHWC memory, a convolution's output in half precision) is pooled where it lies, by the NHWC kernels, into a
channels-last output; any other is made C-contiguous and pooled by the NCHW kernels. Gradients take C-contiguous
arrays and scatter with atomicAdd into a buffer of the accumulation dtype (float32 for the half types, rounded
once)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import is_channels_last

from . import _kernels, _pool_kernels, _runtime
from ._runtime import contiguous, dtype_name
from ._types import accumulation, rounded

Pair = tuple[int, int]
_NCHW = {"maxpool2d": _pool_kernels.MAXPOOL2D, "avgpool2d": _pool_kernels.AVGPOOL2D,
         "adaptiveavgpool2d": _pool_kernels.ADAPTIVE}


def _planes(x: Any) -> int:
    return int(x.shape[0] * x.shape[1])


def _out_hw(x: Any, kernel: Pair, stride: Pair, pad: Pair, dilation: Pair, ceil_mode: bool) -> Pair:
    from algoswap import pool_output_size

    rows, cols = (int(pool_output_size(x.shape[2 + i], kernel[i], stride[i], pad[i], dilation[i], ceil_mode)) for i in (0, 1))
    return rows, cols


def _pool(op: str, x: Any, out_hw: tuple[int, int], *ints: int) -> Any:
    """Kernel ``op`` on ``x`` (NCHW shape, any memory order) into a new array of ``out_hw``, in ``x``'s memory order
    where that is NHWC, else C-contiguous; ``ints`` follow the output size in the kernel's arguments."""
    n, c, h, wd = x.shape
    if not is_channels_last(x):
        x = contiguous(x)
        y = cp.empty((n, c, *out_hw), x.dtype)
        _kernels.launch(_NCHW[op], op, dtype_name(x.dtype), y.size, (x, y), _planes(x), *x.shape[2:], *out_hw, *ints)
        return y
    y = _runtime.empty((n, c, *out_hw), x.dtype, True)
    assert c * max(h * wd, out_hw[0] * out_hw[1]) < 2**31, x.shape  # the kernels index within one image in int
    lanes = _kernels.lanes(c, x, y)
    memory = (x.transpose(0, 2, 3, 1), y.transpose(0, 2, 3, 1))  # C-contiguous views of the NHWC memory
    _kernels.launch(_pool_kernels.nhwc_source(lanes), f"{op}_nhwc_{lanes}", dtype_name(x.dtype), y.size // lanes, memory, y.size // lanes,
                    c, h, wd, *out_hw, *ints)
    return y


def maxpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil_mode: bool) -> Any:
    out = _out_hw(x, kernel_size, stride, padding, dilation, ceil_mode)
    return _pool("maxpool2d", x, out, *kernel_size, *stride, *padding, *dilation)


def maxpool2d_grad(dy: Any, x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
                   ceil_mode: bool) -> Any:
    """Each output finds its window's maximum again and adds its gradient there."""
    dy, x = contiguous(dy), contiguous(x)
    dx = cp.zeros(x.shape, accumulation(x.dtype))
    _kernels.launch(_pool_kernels.MAXPOOL2D, "maxpool2d_grad", dtype_name(x.dtype), dy.size, (dy, x, dx), _planes(x),
                    *x.shape[2:], *dy.shape[2:], *kernel_size, *stride, *padding, *dilation)
    return rounded(dx, x.dtype)


def avgpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None) -> Any:
    out = _out_hw(x, kernel_size, stride, padding, (1, 1), ceil_mode)
    return _pool("avgpool2d", x, out, *kernel_size, *stride, *padding, count_include_pad, divisor_override or 0)


def avgpool2d_grad(dy: Any, *, input_size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    dy = contiguous(dy)
    dx = cp.zeros(tuple(input_size), dtype=accumulation(dy.dtype))
    _kernels.launch(_pool_kernels.AVGPOOL2D, "avgpool2d_grad", dtype_name(dy.dtype), dy.size, (dy, dx), _planes(dx),
                    *input_size[2:], *dy.shape[2:], *kernel_size, *stride, *padding, count_include_pad,
                    divisor_override or 0)
    return rounded(dx, dy.dtype)


def adaptiveavgpool2d(x: Any, *, output_size: Pair) -> Any:
    rows, cols = (x.shape[2 + i] if output_size[i] is None else output_size[i] for i in (0, 1))
    return _pool("adaptiveavgpool2d", x, (rows, cols))


def adaptiveavgpool2d_grad(dy: Any, *, input_size: tuple[int, ...]) -> Any:
    dy = contiguous(dy)
    dx = cp.zeros(tuple(input_size), dtype=accumulation(dy.dtype))
    _kernels.launch(_pool_kernels.ADAPTIVE, "adaptiveavgpool2d_grad", dtype_name(dy.dtype), dy.size, (dy, dx), _planes(dx),
                    *input_size[2:], *dy.shape[2:])
    return rounded(dx, dy.dtype)


def kernel(call: Any) -> str:
    return (f"CuPy raw kernel {call.op} (NCHW: one thread per output; channels-last input: {call.op}_nhwc_<lanes> in NHWC "
            "memory, one thread per 16 bytes of channels, output channels-last)")
