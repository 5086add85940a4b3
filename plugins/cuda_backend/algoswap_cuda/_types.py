"""How the backend's own CUDA code handles the float dtypes, over the one table of C types (_runtime.C_TYPES:
what a raw kernel stores, ``S``, and computes in, ``T``: float for float16 and bfloat16, else ``S``), and
``in_float32`` (the core's ``algoswap.in_float32``), the half-precision path of the ops that are CuPy
expressions: computed in float32 and rounded once to the input's dtype.

Every raw kernel source starts with ``prelude(dtype)``; a kernel reads ``(T)x[i]`` and stores ``(S)v``
(rounding to nearest even), its scalars of type T are passed as ``scalar(dtype, value)`` and its buffers of T
are made with ``accumulation(dtype)``. For float32 and float64 the casts are no-ops: their kernels compute
exactly as before.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from algoswap import in_float32

from ._runtime import C_TYPES, HALF, INCLUDES, dtype_name

__all__ = ["accumulation", "in_float32", "is_half", "prelude", "raw_kernel", "rounded", "scalar"]

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
    return dtype_name(array.dtype) in HALF


def rounded(array: Any, dtype: Any) -> Any:
    """``array`` (of the accumulation dtype of ``dtype``) as ``dtype``: itself where they are the same."""
    return array if array.dtype == dtype else array.astype(dtype)


def raw_kernel(source: str, name: str, dtype: str) -> Any:
    """``source`` compiled for ``dtype`` (its prelude first) as the kernel ``name``."""
    return cp.RawKernel(prelude(dtype) + source, name)
