"""Half precision (float16, bfloat16) on the reference: every float op computes in float32 and rounds
its result once to the input's dtype, as oneDNN and cuDNN accumulate half precision in float32.

One wrapper (``widened``) serves every op; ``widened_family`` applies it to a family module's
functions of the ops that compute (not to data movement, which keeps any dtype as it is). float32
and float64 calls (the oracle path of algoswap.testing) run the function itself, untouched.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

import numpy as np

from algoswap import FAMILIES

_HALF = frozenset("eE")  # the dtype chars of float16 and of ml_dtypes' bfloat16
_FLOATING = frozenset("efdgE")


def _half_dtype(arrays: tuple[Any, ...]) -> np.dtype[Any] | None:
    """The dtype of the first floating input if it is a half precision, else None (the spec gives
    every floating input of a call one dtype; integer indices and boolean masks are skipped)."""
    for array in arrays:
        char = getattr(getattr(array, "dtype", None), "char", None)
        if char in _FLOATING:
            return array.dtype if char in _HALF else None
    return None


def widened(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` computed in float32 on half-precision inputs, its floating result rounded once to their
    dtype. An op that updates inputs in place (it returns one of them) has each input it changed
    written back, rounded, into the array it was given, and returns that array."""

    @functools.wraps(fn)  # its signature is fn's (inspect follows __wrapped__)
    def in_float32(*arrays: Any, **attrs: Any) -> Any:
        half = _half_dtype(arrays)
        if half is None:
            return fn(*arrays, **attrs)
        wide = [a.astype(np.float32) if getattr(a, "dtype", None) == half else a for a in arrays]
        out = fn(*wide, **attrs)
        if any(out is w for w, a in zip(wide, arrays) if w is not a):
            return _written_back(out, arrays, wide)
        return out.astype(half) if getattr(out, "dtype", None) is not None and out.dtype.kind == "f" else out

    return in_float32


def _written_back(out: Any, arrays: tuple[Any, ...], wide: list[Any]) -> Any:
    """The in-place updates of the float32 copies rounded into the inputs they were made from (those
    it left as they were are not written: they may be read-only); the input ``out`` was made from."""
    result = out
    for given, copy in zip(arrays, wide):
        if copy is given:
            continue
        rounded = copy.astype(given.dtype)
        if not np.array_equal(rounded, given, equal_nan=True):
            given[...] = rounded
        result = given if out is copy else result
    return result


def widened_family(module: ModuleType, computes: Callable[[str], bool]) -> ModuleType:
    """``module`` (a family module) as ``add_family`` reads it: the functions of its ops for which
    ``computes(op)`` holds ``widened``, everything else as it is."""
    family = module.__name__.rpartition(".")[2]
    view = ModuleType(module.__name__, module.__doc__)
    view.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__doc__")})
    for op in FAMILIES[family]:
        for name in (op, f"{op}_"):  # slice_: an op named like a builtin
            if computes(op) and callable(vars(module).get(name)):
                setattr(view, name, widened(getattr(module, name)))
    return view
