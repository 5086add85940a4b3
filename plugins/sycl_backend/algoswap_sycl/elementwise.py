"""add: one work-item per element, operands of one shape (broadcasting stays with other backends)."""

from __future__ import annotations

from typing import Any

from ._device import context
from ._launch import finish, start, supports_dtype_and_size


def add(a: Any, b: Any) -> Any:
    ctx, dtype, (ad, bd) = start(a, b)
    y = ctx.empty(tuple(a.shape), dtype)
    ctx.run(dtype, "add", [ad, bd, y], [y.size])
    return finish(ctx, y, (a, b))


def supports_add(call: Any) -> bool | str:
    if call.shape("a") != call.shape("b"):
        return f"operands of one shape only (got {call.shape('a')} and {call.shape('b')}: no broadcasting here)"
    return supports_dtype_and_size(call)


def kernel(call: Any) -> str:
    return f"add: one work-item per element, on {context().describe()}"
