"""add (broadcasting) on CuPy arrays: two C-contiguous arrays of one shape and dtype (a residual connection) in one
vectorised raw kernel (``_vectorised.add``), the rest in a channels-last operand's memory order (``_order.binary``)."""

from __future__ import annotations

from typing import Any

from . import _vectorised
from ._order import binary
from ._runtime import C_TYPES, dtype_name


def add(a: Any, b: Any) -> Any:
    if a.shape == b.shape and a.dtype == b.dtype and dtype_name(a.dtype) in C_TYPES and a.flags.c_contiguous and b.flags.c_contiguous:
        return _vectorised.add(a, b)
    return binary("add", a, b)
