"""Max, average and adaptive average pooling and their gradients. Gradients are gathers (each input
cell sums the windows that read it), so no kernel needs atomics."""

from __future__ import annotations

from typing import Any

from ._device import context
from ._launch import finish, start

Pair = tuple[int, int]


def _planes(shape: tuple[int, ...]) -> int:
    return shape[0] * shape[1]


def maxpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil_mode: bool) -> Any:
    """Maximum over each dilated window (padding never wins)."""
    from algoswap import pool_output_size

    ctx, dtype, (xd,) = start(x)
    n, c, h, w = x.shape
    oh, ow = (pool_output_size(s, k, st, p, d, ceil_mode)
              for s, k, st, p, d in zip((h, w), kernel_size, stride, padding, dilation))
    y = ctx.empty((n, c, oh, ow), dtype)
    ctx.run(dtype, "maxpool2d", [xd, y, h, w, oh, ow, *kernel_size, *stride, *padding, *dilation], [n * c, oh, ow])
    return finish(ctx, y, (x,))


def maxpool2d_grad(dy: Any, x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
                   ceil_mode: bool) -> Any:
    """Each input cell gathers the gradient of the windows whose first maximum (or last NaN) it is."""
    ctx, dtype, (dyd, xd) = start(dy, x)
    n, c, h, w = x.shape
    oh, ow = dy.shape[2:]
    dx = ctx.empty(x.shape, dtype)
    ctx.run(dtype, "maxpool2d_grad", [dyd, xd, dx, h, w, oh, ow, *kernel_size, *stride, *padding, *dilation],
            [n * c, h, w])
    return finish(ctx, dx, (dy, x))


def _divisor(divisor_override: int | None) -> int:
    return 0 if divisor_override is None else divisor_override


def avgpool2d(x: Any, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None) -> Any:
    """Mean over each window, divided as PyTorch divides."""
    from algoswap import pool_output_size

    ctx, dtype, (xd,) = start(x)
    n, c, h, w = x.shape
    oh, ow = (pool_output_size(s, k, st, p, 1, ceil_mode) for s, k, st, p in zip((h, w), kernel_size, stride, padding))
    y = ctx.empty((n, c, oh, ow), dtype)
    ctx.run(dtype, "avgpool2d", [xd, y, h, w, oh, ow, *kernel_size, *stride, *padding, int(count_include_pad),
                                 _divisor(divisor_override)], [n * c, oh, ow])
    return finish(ctx, y, (x,))


def avgpool2d_grad(dy: Any, *, input_size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    """Each input cell gathers grad / divisor from the windows that contain it."""
    ctx, dtype, (dyd,) = start(dy)
    n, c, h, w = input_size
    oh, ow = dy.shape[2:]
    dx = ctx.empty(tuple(input_size), dtype)
    ctx.run(dtype, "avgpool2d_grad", [dyd, dx, h, w, oh, ow, *kernel_size, *stride, *padding, int(count_include_pad),
                                      _divisor(divisor_override)], [n * c, h, w])
    return finish(ctx, dx, (dy,))


def adaptiveavgpool2d(x: Any, *, output_size: Pair) -> Any:
    """Mean over PyTorch's adaptive windows [floor(i*in/out), ceil((i+1)*in/out))."""
    ctx, dtype, (xd,) = start(x)
    n, c, h, w = x.shape
    oh, ow = output_size
    y = ctx.empty((n, c, oh, ow), dtype)
    ctx.run(dtype, "adaptiveavgpool2d", [xd, y, h, w, oh, ow], [n * c, oh, ow])
    return finish(ctx, y, (x,))


def adaptiveavgpool2d_grad(dy: Any, *, input_size: tuple[int, ...]) -> Any:
    ctx, dtype, (dyd,) = start(dy)
    n, c, h, w = input_size
    oh, ow = dy.shape[2:]
    dx = ctx.empty(tuple(input_size), dtype)
    ctx.run(dtype, "adaptiveavgpool2d_grad", [dyd, dx, h, w, oh, ow], [n * c, h, w])
    return finish(ctx, dx, (dy,))


def kernel(call: Any) -> str:
    how = "gather over the windows reading each input cell" if call.op.endswith("_grad") else "one work-item per output"
    return f"{call.op}: {how}, on {context().describe()}"
