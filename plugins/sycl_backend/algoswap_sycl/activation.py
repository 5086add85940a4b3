"""relu and its gradient: one work-item per element."""

from __future__ import annotations

from typing import Any

from ._device import context
from ._launch import finish, start


def relu(x: Any) -> Any:
    """max(x, 0) (NaN propagates)."""
    ctx, dtype, (xd,) = start(x)
    y = ctx.empty(x.shape, dtype)
    ctx.run(dtype, "relu", [xd, y], [xd.size])
    return finish(ctx, y, (x,))


def relu_grad(dy: Any, x: Any) -> Any:
    """0 where x <= 0, else dy (where x is NaN too, as in PyTorch)."""
    ctx, dtype, (dyd, xd) = start(dy, x)
    dx = ctx.empty(x.shape, dtype)
    ctx.run(dtype, "relu_grad", [dyd, xd, dx], [xd.size])
    return finish(ctx, dx, (dy, x))


def kernel(call: Any) -> str:
    return f"{call.op}: one work-item per element, on {context().describe()}"
