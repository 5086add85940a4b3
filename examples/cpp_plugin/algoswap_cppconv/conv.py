"""conv2d "direct" on the C++ extension ``_kernels`` (src/conv.cpp): the output is made here, written there."""

from typing import Any

import numpy as np

from algoswap import conv_geometry

from . import _kernels

Pair = tuple[int, int]


def conv2d_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair,
                  padding: tuple[Pair, Pair], dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """x (N, C, H, W), w (O, C/groups, KH, KW), b (O,) or None, as torch.nn.functional.conv2d.

    algoswap hands over C-contiguous float32 arrays (the extension refuses any other) and the canonical
    attributes: pairs, and ``padding`` explicit as ((top, bottom), (left, right)), zeros only (``supports``)."""
    geometry = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                             padding_mode=padding_mode)
    out = np.empty(geometry.output, dtype=np.float32)
    (top, _), (left, _) = padding
    _kernels.conv2d(x, w, b, out, stride, (top, left), dilation, groups)
    return out


def supports(call: Any) -> bool | str:
    """The calls the extension serves: zero padding (reflect, replicate and circular are refused)."""
    mode = call.attrs["padding_mode"]
    return True if mode == "zeros" else f"pads with zeros only; got padding_mode={mode!r}"


def kernel(call: Any) -> str:
    """The kernel that runs ``call``, as the extension names it."""
    attrs = call.attrs
    return str(_kernels.kernel_name(call.shape("weight"), call.out_shape, attrs["stride"], attrs["dilation"],
                                    attrs["groups"]))
