"""Half precision (float16, bfloat16) computed in float32 and rounded once: the wrapper backends put around
functions of array expressions (NumPy's, CuPy's: any array with ``dtype``, ``astype`` and item assignment)
that would otherwise compute in the half type, as oneDNN and cuDNN accumulate half precision in float32."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

_HALF = frozenset("eE")  # the dtype chars of float16 and of ml_dtypes' bfloat16
_FLOATING = frozenset("efdgE")


def half_dtype(arrays: Sequence[Any]) -> Any:
    """The dtype of the first floating array among ``arrays`` if it is float16 or bfloat16, else None (a
    call's floating inputs share one dtype; integer indices and boolean masks are skipped)."""
    for array in arrays:
        char = getattr(getattr(array, "dtype", None), "char", None)
        if char in _FLOATING:
            return array.dtype if char in _HALF else None
    return None


def in_float32(function: Callable[..., Any] | None = None, *, updated: Sequence[int] = ()) -> Any:
    """``function`` (of arrays, then keyword attributes) for float16 and bfloat16 inputs too: their arrays are
    widened to float32, ``function`` runs on them, and its floating result is rounded once to their dtype. The
    positional inputs ``updated`` (those it updates in place: an optimizer's parameter and state) are written
    back, rounded, and returned as themselves where ``function`` returns them. Calls of other dtypes reach
    ``function`` untouched. A decorator too: ``@in_float32`` or ``@in_float32(updated=(0, 2))``."""
    if function is None:
        return functools.partial(in_float32, updated=tuple(updated))

    @functools.wraps(function)  # its signature is function's (inspect follows __wrapped__)
    def computed_in_float32(*arrays: Any, **attrs: Any) -> Any:
        half = half_dtype(arrays)
        if half is None:
            return function(*arrays, **attrs)
        wide = [a.astype(np.float32) if getattr(a, "dtype", None) == half else a for a in arrays]
        out = function(*wide, **attrs)
        for position in updated:
            arrays[position][...] = wide[position].astype(half)
        for position in updated:
            if out is wide[position]:
                return arrays[position]
        kind = getattr(getattr(out, "dtype", None), "kind", None)
        return out.astype(half) if kind == "f" else out

    return computed_in_float32
