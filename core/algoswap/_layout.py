"""Memory orders: arrays laid out as an implementation takes them (its ``ImplRecord.layout``). Host arrays, and
the arrays of a device library with numpy's ``ascontiguousarray`` (CuPy); other arrays are passed as they are."""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np


def is_channels_last(array: np.ndarray) -> bool:
    """Whether ``array`` is 4-D, NHWC in memory (and not also C-contiguous)."""
    return array.ndim == 4 and not array.flags.c_contiguous and array.transpose(0, 2, 3, 1).flags.c_contiguous


def _library(array: Any) -> Any:
    """numpy, or the module of a device array's library where it has ``ascontiguousarray`` (else None)."""
    if type(array) is np.ndarray:
        return np
    module = sys.modules.get(type(array).__module__.partition(".")[0])
    return module if hasattr(module, "ascontiguousarray") and hasattr(array, "flags") else None


def _contiguous(array: Any) -> Any:
    if array is None or type(array) is np.ndarray and array.flags.c_contiguous:
        return array
    library = _library(array)
    return array if library is None or array.flags.c_contiguous else library.ascontiguousarray(array)


# Up to this many channels a copy channel by channel into NHWC memory is faster than NumPy's transposing copy
# (one thread, 8x3x224x224 floats, a model's input: 0.38 against 2.07 ms; 8x8x112x112 0.38 against 0.60; 8x16x56x56
# 0.32 against 0.21).
FEW_CHANNELS = 4


def _channels_last(array: Any) -> Any:
    if array.transpose(0, 2, 3, 1).flags.c_contiguous:  # NHWC memory already (also where H = W = 1 or C = 1)
        return array
    library = _library(array)
    if library is None:
        return array
    n, c, h, w = array.shape
    if library is np and 1 < c <= FEW_CHANNELS:
        nhwc = np.empty((n, h, w, c), array.dtype)
        for channel in range(c):
            nhwc[..., channel] = array[:, channel]
        return nhwc.transpose(0, 3, 1, 2)
    return library.ascontiguousarray(array.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def arrange(arrays: Sequence[Any], layout: str, weights: tuple[int, ...]) -> Sequence[Any]:
    """The arrays in the memory order an implementation of this ``layout`` takes: 4-D activations
    channels-last for "channels_last" (weights, at ``weights``, stay C-contiguous), everything as it
    is for "any", C-contiguous otherwise."""
    if layout == "any":
        return arrays
    if layout == "channels_last":
        return [_channels_last(a) if getattr(a, "ndim", 0) == 4 and hasattr(a, "flags") and i not in weights
                else _contiguous(a) for i, a in enumerate(arrays)]
    for a in arrays:  # most arrays already are: no new list then
        flags = getattr(a, "flags", None)
        if flags is not None and not flags.c_contiguous:
            return [_contiguous(a) for a in arrays]
    return arrays
