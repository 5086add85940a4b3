"""Bytes of arrays, and what the machine has: a call whose output alone would not fit in memory is
refused when it is bound (before any implementation allocates it), naming the argument to blame."""

from __future__ import annotations

import functools
import math
import os
from typing import TYPE_CHECKING, Any, Mapping

from ._errors import InvalidSpec, OpArgumentError, OutputTooLargeError

if TYPE_CHECKING:
    from ._spec import OpSpec, Shape

ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
}


def nbytes(shape: Shape, dtype: str) -> int:
    """The bytes of an array of this shape and dtype (name)."""
    return math.prod(shape) * ITEMSIZE.get(dtype, 8)


def human_bytes(count: float) -> str:
    """``1.5 GB``, ``12.0 MB``, ``300 B``: decimal units."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{int(count)} B"


@functools.cache
def machine_bytes() -> int | None:
    """The machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_output_fits(spec: OpSpec, named: dict[str, Any], given: Mapping[str, Any], out_shape: Shape, dtype: str) -> None:
    """Refuse (OutputTooLargeError) a call whose output would need more than the machine's memory."""
    limit, need = machine_bytes(), nbytes(out_shape, dtype)
    if limit is None or need <= limit:
        return
    argument = _culprit(spec, named, given, dtype, limit)
    shown = given[argument] if argument in given else f"input shapes {tuple(s for s in named.values())}"
    raise OutputTooLargeError(
        spec.name, argument, shown,
        f"a value for which the output fits in memory: the output {out_shape} {dtype} would need "
        f"{human_bytes(need)}, and this machine has {human_bytes(limit)}",
    )


def _culprit(spec: OpSpec, named: dict[str, Any], given: Mapping[str, Any], dtype: str, limit: int) -> str:
    """The attribute whose default would make the output fit; else the given attribute holding the
    largest int; else "inputs"."""
    for name in given:
        rest = {k: v for k, v in given.items() if k != name}
        try:
            canonical = spec.canonical_attrs(rest)
            shape = spec.apply_rules(named, canonical)[2]
        except (InvalidSpec, OpArgumentError):
            continue  # the attribute has no default, or the call is invalid without it
        if nbytes(tuple(shape), dtype) <= limit:
            return name
    sizes = {name: _largest_int(value) for name, value in given.items()}
    largest = max(sizes, key=lambda name: sizes[name], default=None)
    return largest if largest is not None and sizes[largest] > 0 else "inputs"


def _largest_int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return abs(value)
    if isinstance(value, (tuple, list)):
        return max((_largest_int(v) for v in value), default=0)
    return 0
