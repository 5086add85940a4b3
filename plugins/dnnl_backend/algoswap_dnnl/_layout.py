"""Memory orders of 4-D arrays: NCHW (C-contiguous) and channels-last (NHWC memory, seen as NCHW).

oneDNN 3.2 prefers channels-last activations for float32 convolutions on AVX-512 (its ``any``
layout resolves to NHWC for brgconv), so the convolution and pooling wrappers run channels-last
arrays without copying them and return their output in the same order; swap_backend models keep
activations channels-last between such implementations (``layout="channels_last"``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def is_channels_last(a: np.ndarray) -> bool:
    """Whether ``a`` is a 4-D array laid out NHWC in memory (and not also C-contiguous)."""
    return a.ndim == 4 and not a.flags.c_contiguous and a.transpose(0, 2, 3, 1).flags.c_contiguous


def to_memory_order(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """The C-contiguous array the extension reads: ``a`` as (N, H, W, C) if channels_last, else ``a``."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if channels_last else a)


def from_memory_order(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """An (N, H, W, C) result of the extension seen as NCHW (no copy), or ``a`` itself."""
    return a.transpose(0, 3, 1, 2) if channels_last else a


def elementwise(function: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray:
    """``function`` of same-shape arrays, run on their memory in the first one's order."""
    channels_last = is_channels_last(arrays[0])
    out = function(*(to_memory_order(a, channels_last) for a in arrays))
    return from_memory_order(out, channels_last)
