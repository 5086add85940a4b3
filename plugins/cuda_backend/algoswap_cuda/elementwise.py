"""add (broadcasting) on CuPy arrays, in a channels-last operand's memory order (_order.binary)."""

from __future__ import annotations

from typing import Any

from ._order import binary


def add(a: Any, b: Any) -> Any:
    return binary("add", a, b)
