"""add on our kernel (float32): operands of one shape (broadcasting stays with other backends)."""

from __future__ import annotations

from typing import Any

from .._device import MpsArray
from . import _launch


def add(a: MpsArray, b: MpsArray) -> MpsArray:
    y = _launch.empty(a.shape)
    _launch.run("add", a.tensor, b.tensor, y, _launch.params("CountParams", count=y.numel()), threads=[y.numel()],
                group=[256])
    return MpsArray(y)


def supports_add(call: Any) -> bool | str:
    if call.shape("a") != call.shape("b"):
        return f"operands of one shape only (got {call.shape('a')} and {call.shape('b')}: no broadcasting here)"
    return _launch.supports_size(call)
