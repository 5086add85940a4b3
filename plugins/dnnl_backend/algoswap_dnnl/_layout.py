"""Memory orders of 4-D arrays: NCHW (C-contiguous) and channels-last (NHWC memory, seen as NCHW).

oneDNN 3.2 prefers channels-last activations for float32 convolutions on AVX-512 (its ``any``
layout resolves to NHWC for brgconv), so the convolutions declare ``layout="channels_last"``: the
core gives them NHWC activations, and they return their output in the same order. The pooling and
elementwise wrappers (``layout="any"``) run either order as it comes, without copying.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from algoswap import is_channels_last

__all__ = ["elementwise", "from_memory_order", "is_channels_last", "memory_order", "to_memory_order"]


def to_memory_order(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """The C-contiguous array the extension reads: ``a`` as (N, H, W, C) if channels_last, else ``a``."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if channels_last else a)


def memory_order(a: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(``a``'s memory as a C-contiguous array, the axes of ``a`` in that order): ``a`` transposed, without a
    copy, where it is a permutation of a C-contiguous array (channels-last arrays among them); otherwise
    a C-contiguous copy of ``a`` and the identity order."""
    if a.flags.c_contiguous:
        return a, tuple(range(a.ndim))
    order = tuple(sorted(range(a.ndim), key=lambda axis: -a.strides[axis]))
    view = a.transpose(order)
    if view.flags.c_contiguous:
        return view, order
    return np.ascontiguousarray(a), tuple(range(a.ndim))


def from_memory_order(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """An (N, H, W, C) result of the extension seen as NCHW (no copy), or ``a`` itself."""
    return a.transpose(0, 3, 1, 2) if channels_last else a


def elementwise(function: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray:
    """``function`` of same-shape arrays, run on their memory in the first one's order."""
    channels_last = is_channels_last(arrays[0])
    out = function(*(to_memory_order(a, channels_last) for a in arrays))
    return from_memory_order(out, channels_last)
