"""How the backend's own CUDA code handles the float dtypes, over the one table of C types (_runtime.C_TYPES:
what a raw kernel stores, ``S``, and computes in, ``T``: float for float16 and bfloat16, else ``S``), and
``in_float32``, the half-precision path of the ops that are CuPy expressions: computed in float32 and rounded
once to the input's dtype.

Every raw kernel source starts with ``prelude(dtype)``; a kernel reads ``(T)x[i]`` and stores ``(S)v``
(rounding to nearest even), its scalars of type T are passed as ``scalar(dtype, value)`` and its buffers of T
are made with ``accumulation(dtype)``. For float32 and float64 the casts are no-ops: their kernels compute
exactly as before.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import cupy as cp
import numpy as np

from ._runtime import C_TYPES, HALF, INCLUDES

_NUMPY: dict[str, np.dtype[Any]] = {"float": np.dtype(np.float32), "double": np.dtype(np.float64)}  # T's C type -> numpy


def prelude(dtype: str) -> str:
    """The head of every kernel source of ``dtype``: the headers of the half precisions, and S and T."""
    storage, compute = C_TYPES[dtype]
    return f"{INCLUDES if dtype in HALF else ''}typedef {storage} S;\ntypedef {compute} T;\n"


def accumulation(dtype: Any) -> np.dtype[Any]:
    """The numpy dtype of T for arrays of ``dtype``: float32 for the half precisions, else the dtype itself."""
    return _NUMPY[C_TYPES[dtype.name if isinstance(dtype, np.dtype) else np.dtype(dtype).name][1]]


def scalar(dtype: Any, value: float) -> Any:
    """``value`` as a kernel argument of type T."""
    return accumulation(dtype).type(value)


def is_half(array: Any) -> bool:
    return array.dtype.name in HALF


def _half_dtype(args: tuple[Any, ...]) -> Any:
    """The dtype of the first floating array among ``args`` if it is a half type, else None."""
    for a in args:
        dtype = getattr(a, "dtype", None)
        if dtype is None or dtype.kind in "biu":
            continue
        return dtype if dtype.name in HALF else None
    return None


def in_float32(function: Callable[..., Any] | None = None, *, updated: tuple[int, ...] = ()) -> Any:
    """``function`` (a CuPy expression of float arrays) for float16 and bfloat16 too: their arrays are
    widened to float32, ``function`` runs on them, and its float32 result is rounded once to the input's
    dtype. The positional inputs ``updated`` (updated in place) are written back, rounded, and returned
    where ``function`` returns them. float32 and float64 calls go straight to ``function``."""
    if function is None:
        return functools.partial(in_float32, updated=updated)

    @functools.wraps(function)
    def wrapper(*args: Any, **attrs: Any) -> Any:
        half = _half_dtype(args)
        if half is None:
            return function(*args, **attrs)
        wide = [a.astype(np.float32) if getattr(a, "dtype", None) == half else a for a in args]
        out = function(*wide, **attrs)
        for position in updated:
            args[position][...] = wide[position].astype(half)
        for position in updated:
            if out is wide[position]:
                return args[position]
        return out.astype(half) if getattr(out, "dtype", np.dtype(bool)).kind == "f" else out

    return wrapper


def rounded(array: Any, dtype: Any) -> Any:
    """``array`` (of the accumulation dtype of ``dtype``) as ``dtype``: itself where they are the same."""
    return array if array.dtype == dtype else array.astype(dtype)


def raw_kernel(source: str, name: str, dtype: str) -> Any:
    """``source`` compiled for ``dtype`` (its prelude first) as the kernel ``name``."""
    return cp.RawKernel(prelude(dtype) + source, name)
