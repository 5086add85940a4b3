"""transpose on the oneDNN reorder primitive: the input read through permuted strides, written dense."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, too_many_dims


def transpose(x: np.ndarray, *, perm: tuple[int, ...]) -> np.ndarray:
    """Output axis d is input axis perm[d] (a copy)."""
    out: np.ndarray = dnnl.transpose(np.ascontiguousarray(x), list(perm))
    return out


def supports(call: Any) -> bool | str:
    """Arrays oneDNN's memory descriptors can hold."""
    return too_many_dims(call.shapes) or True


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(dnnl.transpose_impl(list(call.shape("input")), list(call.attrs["perm"])).impl)
