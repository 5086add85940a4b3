"""Frozen arrays: host arrays whose memory nothing can write, so data derived from them may be cached.

A backend may keep what it derives from an input (weights reordered into its layout, a copy in device
memory) from one call to the next only if that input cannot have changed in between. A read-only
flag alone does not promise that: a read-only view sees every write to the array it views, and an
array that owns its memory can be made writeable again. ``freeze`` copies an array into an immutable
``bytes`` object and views it (numpy refuses to make such a view writeable); ``is_frozen`` tells such
arrays (and views of them) from all others. swap_backend Models keep their weights frozen.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def freeze(array: Any) -> np.ndarray:
    """A C-contiguous copy of ``array`` that nothing can write (itself, if it already is one)."""
    if isinstance(array, np.ndarray) and is_frozen(array) and array.flags.c_contiguous:
        return array
    source = np.ascontiguousarray(array)
    frozen: np.ndarray = np.frombuffer(source.tobytes(), dtype=source.dtype).reshape(source.shape)
    return frozen


def is_frozen(array: Any) -> bool:
    """Whether ``array`` is a numpy array whose memory is an immutable ``bytes`` object (made by
    ``freeze``, or a view of such an array): its contents cannot change while it lives."""
    if not isinstance(array, np.ndarray) or array.flags.writeable:
        return False
    base: Any = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, bytes)
