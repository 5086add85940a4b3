"""transpose on the oneDNN reorder primitive: the input's memory read through permuted strides, written
dense; no copy where the input's memory already is in the output's order (a channels-last activation
permuted to NHWC, as ConvNeXt does: the result is that memory seen as (N, H, W, C)), nor where the result
seen through permuted strides is a channels-last 4-D array (ConvNeXt's permute back to NCHW: the next
convolution takes that memory as it is, where a dense copy would be copied back to NHWC for it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, too_many_dims
from ._layout import is_channels_last, memory_order


def transpose(x: np.ndarray, *, perm: tuple[int, ...]) -> np.ndarray:
    """Output axis d is input axis perm[d]."""
    view = x.transpose(perm)
    if view.flags.c_contiguous or is_channels_last(view):
        return view
    memory, order = memory_order(x)
    out: np.ndarray = dnnl.transpose(memory, [order.index(axis) for axis in perm])
    return out


def supports(call: Any) -> bool | str:
    """Arrays oneDNN's memory descriptors can hold."""
    return too_many_dims(call.shapes) or True


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(dnnl.transpose_impl(list(call.shape("input")), list(call.attrs["perm"])).impl)
