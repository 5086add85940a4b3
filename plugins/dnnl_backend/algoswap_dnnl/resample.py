"""interpolate and its gradient on oneDNN's resampling primitive (resampling_nearest, resampling_linear),
for the geometries where it reads exactly the elements PyTorch reads (algoswap.interpolation_taps).

oneDNN maps output d to input coordinate (d + 0.5) * in / out - 0.5, rounded (nearest) or between its
floor and ceiling (linear). Nearest then agrees with PyTorch's legacy floor(d * in / out) for integer
upscales (and the identity): d = q*k + r lies within 0.5 - 0.5/k of q. Linear agrees where PyTorch reads
two neighbours with weights strictly between 0 and 1 and oneDNN the same two: not at an upscale's edges
(PyTorch clamps the coordinate to 0 and still multiplies the next element, by 0: an inf there is NaN),
nor at integer coordinates, nor where a scale factor other than out / in maps coordinates, nor with
align_corners. Other geometries are refused, with the reason; so is bicubic (oneDNN has no cubic mode).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algoswap import interpolation_taps

from ._ext import dnnl, refusal
from ._layout import from_memory_order, is_channels_last, to_memory_order

Pair = tuple[int, int]


def interpolate(x: np.ndarray, *, size: Pair, scale_factor: Any, mode: str, align_corners: Any,
                recompute_scale_factor: Any) -> np.ndarray:
    channels_last = is_channels_last(x)
    y = dnnl.resample(to_memory_order(x, channels_last), list(size), mode, channels_last=channels_last)
    return from_memory_order(y, channels_last)


def interpolate_grad(dy: np.ndarray, *, input_size: tuple[int, ...], scale_factor: Any, mode: str,
                     align_corners: Any) -> np.ndarray:
    out: np.ndarray = dnnl.resample_grad(np.ascontiguousarray(dy), list(input_size), mode)
    return out


# ---------------------------------------------------------------------- selection and kernels


def _geometry(call: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the input's (N, C, H, W), the output's (H, W))."""
    if call.op == "interpolate":
        return call.shape("input"), call.attrs["size"]
    return call.attrs["input_size"], call.shape("grad_output")[2:]


def _axis_differs(size: int, out: int, factor: float | None, mode: str, align_corners: Any) -> str:
    """Why oneDNN reads other elements than PyTorch along one axis ("" if it reads the same)."""
    indices, weights = interpolation_taps(size, out, factor, mode, align_corners, "float32")
    first = indices[:, 0]
    if mode == "nearest":
        if out % size == 0 and (first == np.arange(out) // (out // size)).all():
            return ""
        return f"nearest from {size} to {out}: oneDNN rounds (d + 0.5) * in / out - 0.5, PyTorch floors d * scale"
    if align_corners:
        return "oneDNN's linear resampling has no align_corners"
    coordinate = (np.arange(out) + 0.5) * size / out - 0.5
    lower = np.floor(coordinate)
    margin = size * 2.0**-20  # some multiples of float32's rounding of a coordinate up to size
    second, weight = indices[:, -1], weights[:, -1]  # the same size: one tap of weight 1 and one of 0, refused
    same = (first == lower) & (second == first + 1) & (weight > 0) & (weight < 1) & (coordinate - lower > margin) \
        & (lower + 1 - coordinate > margin)
    if same.all():
        return ""
    return (f"bilinear from {size} to {out}: PyTorch reads an element with weight 0 or oneDNN other elements at output "
            f"{int(np.flatnonzero(~same)[0])} (upscale edges, integer coordinates, a scale factor other than out / in)")


def supports(call: Any) -> bool | str:
    if call.attrs["mode"] not in ("nearest", "bilinear"):
        return f"oneDNN's resampling has no {call.attrs['mode']} mode (only nearest and linear)"
    (_, _, *extents), outputs = _geometry(call)
    factors = call.attrs["scale_factor"] or (None, None)
    for axis in range(2):
        differs = _axis_differs(extents[axis], outputs[axis], factors[axis], call.attrs["mode"], call.attrs["align_corners"])
        if differs:
            return differs
    return refusal(lambda: _plan(call))


def _plan(call: Any) -> Any:
    size, outputs = _geometry(call)
    return dnnl.resample_impl(list(size), list(outputs), call.attrs["mode"], backward=call.op == "interpolate_grad")


def kernel(call: Any) -> str:
    return str(_plan(call).impl)
