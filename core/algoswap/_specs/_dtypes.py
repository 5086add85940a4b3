"""Dtype rules for ops mixing floating arrays with integer indices or boolean masks."""

from __future__ import annotations

from typing import Callable, Sequence

from .._errors import OpDtypeError
from .._spec import INT_DTYPES, same_float_dtype

DtypeRule = Callable[[str, Sequence[str], Sequence[str | None]], str]


def typed(ints: tuple[str, ...] = (), bools: tuple[str, ...] = (), soft: tuple[str, ...] = (),
          masks: tuple[str, ...] = ()) -> DtypeRule:
    """Inputs named in ``ints`` take integer dtypes, those in ``bools`` take bool, those in ``soft``
    take either an integer dtype or the common floating dtype, those in ``masks`` bool or the common
    floating dtype; the others share one floating dtype, which the output keeps (with no floating
    input, the output keeps the first integer dtype)."""

    def rule(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
        rest_names, rest = [], []
        for name, dtype in zip(names, dtypes):
            if dtype is None or (name in masks and dtype == "bool"):
                continue
            if name in ints or (name in soft and dtype in INT_DTYPES):
                if dtype not in INT_DTYPES:
                    raise OpDtypeError(op, name, dtype, f"an integer dtype ({', '.join(INT_DTYPES)})")
            elif name in bools:
                if dtype != "bool":
                    raise OpDtypeError(op, name, dtype, "bool")
            else:
                rest_names.append(name)
                rest.append(dtype)
        if rest:
            return same_float_dtype(op, rest_names, rest)
        return next(d for n, d in zip(names, dtypes) if d is not None and n in ints)

    return rule
