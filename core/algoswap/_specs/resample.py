"""interpolate (torch.nn.functional.interpolate of NCHW input, modes "nearest", "bilinear" and "bicubic") and its
gradient, with torch's rules for the output size and for which input elements each output reads.

The output size is resolved as F.interpolate does: ``size``, or floor(input size * scale_factor);
the scale factor then also maps output coordinates to input ones, unless recompute_scale_factor=True
(then input size / output size does). The canonical form names both the size and the scale factor
(as ``aten.upsample_nearest2d`` takes them): the size must then be floor(input size * scale_factor).
Which input elements an output reads, and with which weights, is ``interpolation_taps``: torch's CPU
rules, evaluated in torch's arithmetic (float32 for nearest; the input's precision, float32 for
half-precision inputs, for bilinear and bicubic), so that every backend reads the same elements as torch (which
decides which NaN and infinities reach an output: a tap of weight 0 still multiplies its element).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .._cache import LRUCache, declare_cache
from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import boolean, choice, expected, expecting, optional, pair, real
from ._geometry import shape_attr

_FAMILY = "resample"
Taps = tuple[np.ndarray, np.ndarray]  # (out, k) input indices, (out, k) their weights
_CUBIC = -0.75  # torch's A of the cubic convolution kernel


@expecting("a real number > 0 or a pair of them")
def _scale_pair(value: Any) -> tuple[float, float]:
    what = expected(_scale_pair)
    values = value if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2:
        raise ValueError(what)
    try:
        first, second = (real(0.0, open_min=True)(v) for v in values)
    except ValueError:
        raise ValueError(what) from None
    return first, second


_MODE = Attr("mode", "nearest", choice("nearest", "bilinear", "bicubic"),
             "'nearest' (torch's legacy rule), 'bilinear' or 'bicubic' (A = -0.75, border indices clamped)")
_ALIGN = Attr("align_corners", None, optional(boolean),
              "bilinear, bicubic: corner pixels' centres align (None: False); nearest: None")
_SCALE = Attr("scale_factor", None, optional(_scale_pair), "output size / input size, a float or (h, w) (None: from size)")
_ATTRS = (
    Attr("size", None, optional(pair(1)), "the output (H, W), an int or a pair (None: from scale_factor)"),
    _SCALE, _MODE, _ALIGN,
    Attr("recompute_scale_factor", None, optional(boolean), "True: map coordinates by input / output size, not scale_factor"),
)


def _resolve_align(attrs: dict[str, Any]) -> Any:
    if attrs["mode"] == "nearest":
        if attrs["align_corners"] is not None:
            raise InvalidSpec("align_corners", attrs["align_corners"], "None for mode 'nearest' (only interpolating modes take it)")
        return None
    return bool(attrs["align_corners"])


def _resolve(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """F.interpolate's rules: the output size, and the scale factors that map coordinates (None: in / out)."""
    spatial = shapes["input"][2:]
    size, factors, recompute = attrs["size"], attrs["scale_factor"], attrs["recompute_scale_factor"]
    if size is None and factors is None:
        raise InvalidSpec("size", None, "a size or a scale_factor (one of them)")
    if size is not None and recompute:
        raise InvalidSpec("recompute_scale_factor", recompute, "None or False with an explicit size")
    if factors is not None:
        scaled = tuple(math.floor(float(extent) * factor) for extent, factor in zip(spatial, factors))
        if size is not None and tuple(size) != scaled:
            raise InvalidSpec("scale_factor", factors, f"None when size is given (or, with it, floor(input size "
                              f"{tuple(spatial)} * scale_factor) == size {tuple(size)})")
        size = scaled
    if min(size) < 1 or min(spatial) < 1:
        raise InvalidSpec("input" if min(spatial) < 1 else "size", f"input (H, W) {tuple(spatial)}, output {tuple(size)}",
                          "input and output sizes of at least 1")
    return {"size": tuple(size), "scale_factor": None if recompute else factors, "mode": attrs["mode"],
            "align_corners": _resolve_align(attrs), "recompute_scale_factor": None}


def _grad_resolve(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return {**attrs, "align_corners": _resolve_align(attrs)}


def _grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    grad, size = shapes["grad_output"], attrs["input_size"]
    if grad[:2] != size[:2] or min(size[2:]) < 1:
        raise InvalidSpec("grad_output", f"shape {grad}", f"batch and channels {size[:2]} of input_size {size} (H, W >= 1)")
    return size


def _grad_attrs(call: OpCall) -> dict[str, Any]:
    a = call.attrs
    return {"input_size": call.shape("input"), "scale_factor": a["scale_factor"], "mode": a["mode"],
            "align_corners": a["align_corners"]}


interpolate = OpSpec(
    "interpolate", (Input("input", (4,)),), _ATTRS,
    shape_rule=lambda shapes, attrs: shapes["input"][:2] + attrs["size"], resolve=_resolve, family=_FAMILY,
    gradients=(GradRule("input", "interpolate_grad", ("grad_output",), _grad_attrs),),
    doc="Nearest, bilinear or bicubic resampling of NCHW input to size (or by scale_factor), like "
    "torch.nn.functional.interpolate (interpolation_taps: which elements each output reads).",
)
interpolate_grad = OpSpec(
    "interpolate_grad", (Input("grad_output", (4,)),),
    (Attr("input_size", convert=shape_attr(4), doc="(N, C, H, W) of the forward input"), _SCALE, _MODE, _ALIGN),
    shape_rule=_grad_shape, resolve=_grad_resolve, family=_FAMILY, grad_of="interpolate",
    doc="Gradient of interpolate (its output size is grad_output's): each output's gradient added to the input "
    "elements it read, times their weights.",
)

SPECS = (interpolate, interpolate_grad)


# ------------------------------------------------------------------------------ torch's index rules


def _opmath(mode: str, dtype: str) -> type[np.floating[Any]]:
    """The precision torch computes coordinates in: float32 for nearest, else the input's (float32 for halves)."""
    return np.float64 if mode != "nearest" and dtype == "float64" else np.float32


def _coordinate_scale(size: int, out: int, factor: float | None, align_corners: bool, real: Any) -> Any:
    """torch's area_pixel_compute_scale (compute_scales_value where corners are not aligned)."""
    if align_corners:
        return real(size - 1) / real(out - 1) if out > 1 else real(0)
    if factor is not None and factor > 0:
        return real(1.0 / factor)
    return real(size) / real(out)


TAPS = declare_cache("interpolation_taps", 256, "interpolate: the input elements and weights of each output, per axis "
                     "size, output size, scale factor, mode, precision and direction")
_taps: LRUCache[Taps] = LRUCache(TAPS)


def interpolation_taps(size: int, out: int, factor: float | None, mode: str, align_corners: bool | None,
                       dtype: str, gradient: bool = False) -> Taps:
    """Along one axis of ``size`` input elements resampled to ``out``: for each output position, the k input
    indices it reads and their weights ((out, k) int64 and float64 arrays: k is 1 for nearest, 2 for bilinear,
    4 for bicubic; a single tap of weight 1 is read, never multiplied), by torch's CPU rules in torch's
    arithmetic (``dtype``: the input's). ``factor``: the scale factor that maps coordinates (None: size / out).
    An output is the sum over its taps in order (along the columns first, then the rows). ``gradient``: the taps
    torch's gradient scatters to (bicubic's, compiled apart from its forward, computes its coordinates without
    a fused multiply-add; torch's bicubic gradient also copies a plane of the same size: not a rule of one axis,
    each backend keeps it). Read-only arrays, cached."""
    fused = not (gradient and mode == "bicubic")
    key = (size, out, factor, mode, align_corners, _opmath(mode, dtype).__name__, fused)
    found: Taps | None = _taps.get(key)
    return found if found is not None else _taps.put(key, _computed_taps(size, out, factor, mode, align_corners, dtype, fused))


def _computed_taps(size: int, out: int, factor: float | None, mode: str, align_corners: bool | None, dtype: str,
                   fused: bool) -> Taps:
    real = _opmath(mode, dtype)
    positions = np.arange(out)
    if mode == "bicubic":
        indices, weights = _cubic_taps(size, out, factor, bool(align_corners), real, fused)
    elif out == size:  # torch copies, whatever the factor (bilinear: 1 * x[i] + 0 * x[i])
        indices, weights = (positions[:, None], np.ones((out, 1))) if mode == "nearest" else \
            (np.stack([positions, positions], 1), np.stack([np.ones(out), np.zeros(out)], 1))
    elif mode == "nearest":
        indices, weights = _nearest_taps(size, out, factor, real)
    else:
        indices, weights = _linear_taps(size, out, factor, bool(align_corners), real)
    taps = (np.ascontiguousarray(indices, np.int64), np.ascontiguousarray(weights, np.float64))
    for array in taps:  # shared by every caller
        array.setflags(write=False)
    return taps


def _nearest_taps(size: int, out: int, factor: float | None, real: Any) -> Taps:
    """torch's legacy nearest: floor(d * scale) in float32 (d // 2 for an exact doubling)."""
    positions = np.arange(out)
    scale = _coordinate_scale(size, out, factor, False, real)
    first = positions >> 1 if out == 2 * size else np.minimum(np.floor(positions.astype(real) * scale).astype(np.int64), size - 1)
    return first[:, None], np.ones((out, 1))


def _rounded(value: Fraction, real: Any) -> Any:
    """``value`` rounded once to ``real`` (to nearest, ties to even)."""
    nearest = real(float(value))  # float() rounds correctly to float64, so to float32 it may round twice: check
    if real is np.float64:
        return nearest
    around = (np.nextafter(nearest, real(-np.inf)), nearest, np.nextafter(nearest, real(np.inf)))
    return min(around, key=lambda f: (abs(Fraction(float(f)) - value), int(np.asarray(f).view(np.int32)) & 1))


def _fused_multiply_add(a: Any, b: np.ndarray, c: float, real: Any) -> np.ndarray:
    """a * b + c, rounded once: torch's compiled kernels (AVX2 and AVX-512 builds, CUDA) contract
    scale * (i + 0.5) - 0.5 into one FMA instruction, which decides the taps of an output whose
    coordinate is within a rounding of an integer."""
    return np.array([_rounded(Fraction(float(a)) * Fraction(float(x)) + Fraction(c), real) for x in b], dtype=real)


def _source(size: int, out: int, factor: float | None, align_corners: bool, real: Any, clamp: bool,
            fused: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """torch's area_pixel_compute_source_index and guard_index_and_lambda: the source coordinate of each output
    (clamped at 0 if ``clamp``: linear, not cubic; with one rounding of scale * (d + 0.5) - 0.5 if ``fused``,
    else two), its floor (taken of the coordinate rounded to float32, as
    torch's floorf does; at most size - 1) and the distance from it, clamped to [0, 1] (float64 arrays)."""
    scale = _coordinate_scale(size, out, factor, align_corners, real)
    positions = np.arange(out).astype(real)
    if align_corners:
        coordinate = scale * positions
    else:
        half = positions + real(0.5)
        coordinate = _fused_multiply_add(scale, half, -0.5, real) if fused else scale * half - real(0.5)
        coordinate = np.maximum(coordinate, real(0)) if clamp else coordinate
    first = np.minimum(np.floor(coordinate.astype(np.float32)).astype(np.int64), size - 1)
    return first, np.clip(coordinate - first.astype(real), real(0), real(1)).astype(np.float64)


def _linear_taps(size: int, out: int, factor: float | None, align_corners: bool, real: Any) -> Taps:
    """torch's compute_source_index_and_lambda: the floor and the next element (the last: itself)."""
    first, weight = _source(size, out, factor, align_corners, real, clamp=True)
    second = first + (first < size - 1)
    return np.stack([first, second], 1), np.stack([1.0 - weight, weight], 1)


def _cubic_taps(size: int, out: int, factor: float | None, align_corners: bool, real: Any, fused: bool) -> Taps:
    """torch's bicubic: elements floor - 1 .. floor + 2, clamped into [0, size), weighted by the cubic
    convolution kernel (A = -0.75) at distances t + 1, t, 1 - t, 2 - t, computed in ``real``."""
    first, t = _source(size, out, factor, align_corners, real, False, fused)
    indices = np.clip(first[:, None] + np.arange(-1, 3), 0, size - 1)
    t = t.astype(real)
    near, far = _cubic_near(t, real), _cubic_near(real(1) - t, real)
    return indices, np.stack([_cubic_far(t + real(1), real), near, far, _cubic_far(real(2) - t, real)], 1).astype(np.float64)


def _cubic_near(x: np.ndarray, real: Any) -> np.ndarray:
    """torch's cubic_convolution1: the kernel at distance |x| <= 1."""
    a = real(_CUBIC)
    return ((a + real(2)) * x - (a + real(3))) * x * x + real(1)


def _cubic_far(x: np.ndarray, real: Any) -> np.ndarray:
    """torch's cubic_convolution2: the kernel at distance 1 <= |x| <= 2."""
    a = real(_CUBIC)
    return ((a * x - real(5) * a) * x + real(8) * a) * x - real(4) * a
