"""Planting NaN and infinities into a case's inputs, and comparing non-finite results, for
the non-finite conformance checks (algoswap/testing/_nonfinite_check.py).

A trial is one copy of a case's inputs with non-finite values planted: NaN at the first and last
entries of one input and NaN, +inf and -inf at random positions of it ("scattered"), or one value over a whole region of the first
floating input ("region": a random block; the whole reduced line for softmax-like ops, a whole
pooling window for pooling). Every entry of a result is finite, NaN, +inf or -inf; the comparison
checks those classes entry by entry, then the finite entries by relative error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

import algoswap

VALUES = (np.nan, np.inf, -np.inf)
FINITE, NAN, POS_INF, NEG_INF = "finite", "nan", "+inf", "-inf"
Region = Callable[[algoswap.OpCall, tuple[int, ...], np.random.Generator], tuple[slice, ...]]


@dataclass
class Trial:
    inputs: list[Any]
    what: str


def plantable(array: Any) -> bool:
    """Whether non-finite values can be planted: a floating array, or a CSR matrix with stored entries."""
    if array is None:
        return False
    if not isinstance(array, np.ndarray):
        return bool(array.nnz)
    return bool(array.dtype.kind == "f" or array.dtype.name == "bfloat16")


def _values(array: Any) -> np.ndarray:
    """The array whose entries are planted into (a CSR matrix's stored entries)."""
    return array if isinstance(array, np.ndarray) else array.data


def _copy(inputs: list[Any]) -> list[Any]:
    return [None if a is None else a.copy() for a in inputs]


def _scattered(inputs: list[Any], position: int, name: str, rng: np.random.Generator, kinds: tuple[float, ...]) -> Trial:
    planted = _copy(inputs)
    flat = _values(planted[position]).reshape(-1)
    # each kind at a random place, and NaN at the first and last entries (corners: where padding and
    # border windows are) unless taken
    where = rng.choice(flat.size, size=min(len(kinds), flat.size), replace=False)
    values = rng.permutation(np.array(kinds))[: where.size]
    corners = np.setdiff1d([0, flat.size - 1], where)
    where, values = np.concatenate([where, corners]), np.concatenate([values, np.full(corners.size, np.nan)])
    flat[where] = values
    shape = _values(planted[position]).shape
    spots = ", ".join(f"{_show(v)} at {tuple(int(i) for i in np.unravel_index(w, shape))}" for v, w in zip(values, where))
    return Trial(planted, f"'{name}': {spots}")


def _show(value: float) -> str:
    return "nan" if math.isnan(value) else ("+inf" if value > 0 else "-inf")


def _random_block(call: algoswap.OpCall, shape: tuple[int, ...], rng: np.random.Generator) -> tuple[slice, ...]:
    extents = [int(rng.integers(1, size + 1)) for size in shape]
    return _block(shape, extents, rng)


def _block(shape: tuple[int, ...], extents: list[int], rng: np.random.Generator) -> tuple[slice, ...]:
    starts = [int(rng.integers(0, size - extent + 1)) for size, extent in zip(shape, extents)]
    return tuple(slice(s, s + e) for s, e in zip(starts, extents))


def _along(axis: Callable[[algoswap.OpCall, int], tuple[int, ...]]) -> Region:
    """Whole lines along the axes ``axis(call, ndim)`` names; one random index on every other axis."""
    def region(call: algoswap.OpCall, shape: tuple[int, ...], rng: np.random.Generator) -> tuple[slice, ...]:
        full = {a % len(shape) for a in axis(call, len(shape))}
        return _block(shape, [size if a in full else 1 for a, size in enumerate(shape)], rng)

    return region


def _window(call: algoswap.OpCall, shape: tuple[int, ...], rng: np.random.Generator) -> tuple[slice, ...]:
    """One whole pooling window's span (dilated) of one plane."""
    (kh, kw), (dh, dw) = call.attrs["kernel_size"], call.attrs.get("dilation", (1, 1))
    spans = [min(dh * (kh - 1) + 1, shape[2]), min(dw * (kw - 1) + 1, shape[3])]
    return _block(shape, [1, 1] + spans, rng)


_AXIS = _along(lambda call, ndim: (call.attrs["axis"],))
_NORMALIZED = _along(lambda call, ndim: tuple(range(ndim - call.attrs["normalized_ndim"], ndim)))
_ROWS = _along(lambda call, ndim: (ndim - 1,))
# Ops whose results mix a whole line or window: the region covers one of them, so that a line or
# window made wholly of one non-finite value is tried too.
REGIONS: dict[str, Region] = {
    "softmax": _AXIS, "log_softmax": _AXIS, "softmax_grad": _AXIS, "log_softmax_grad": _AXIS,
    "layer_norm": _NORMALIZED, "layer_norm_grad_input": _NORMALIZED, "layer_norm_grad_weight": _NORMALIZED,
    "softmax_cross_entropy": _ROWS, "maxpool2d": _window, "avgpool2d": _window,
}


# Inputs that get NaN only: infinities planted there meet each other in torch's own formula, and
# whether they cancel to NaN there is an artifact of that formula, not a property of the op.
NAN_ONLY: dict[tuple[str, str], str] = {
    ("layer_norm_grad_input", "grad_output"): "torch computes b * x + c (with c = -b * mean - ...), not b * (x - mean): "
    "with an infinite b its NaN depends on the sign of x, not of x - mean (layer norm does not change when x shifts)",
}


def trials(call: algoswap.OpCall, inputs: list[Any], rng: np.random.Generator) -> Iterator[Trial]:
    """The trials of one case: scattered values in each floating input in turn, then a region of
    each non-finite value in the first (dense) one."""
    positions = [p for p, a in enumerate(inputs) if plantable(a)]
    for position in positions:
        name = call.input_names[position]
        yield _scattered(inputs, position, name, rng, (np.nan,) if (call.op, name) in NAN_ONLY else VALUES)
    dense = [p for p in positions if isinstance(inputs[p], np.ndarray)]
    if not dense:
        return
    first = dense[0]
    region = REGIONS.get(call.op, _random_block)(call, inputs[first].shape, rng)
    for value in (np.nan,) if (call.op, call.input_names[first]) in NAN_ONLY else VALUES:
        planted = _copy(inputs)
        planted[first][region] = value
        bounds = ", ".join(f"{s.start}:{s.stop}" for s in region)
        yield Trial(planted, f"'{call.input_names[first]}'[{bounds}] all {_show(value)}")


def classes(array: np.ndarray) -> np.ndarray:
    """Each entry's class: finite, nan, +inf or -inf."""
    a = np.asarray(array, dtype=np.float64)
    return np.select([np.isnan(a), a == np.inf, a == -np.inf], [NAN, POS_INF, NEG_INF], FINITE)


def compare(got: np.ndarray, expected: np.ndarray, nan: str, tolerance: float, scale: float, oracle: str = "torch") -> str:
    """What differs ("" if nothing). ``nan="exact"``: every entry's class is the oracle's;
    ``"spreads"``: an entry may also be NaN where the oracle's is not. Entries finite in both agree
    within ``tolerance``, relative to their norm or, if larger, to ``scale`` (the oracle's RMS on
    the inputs before planting) per entry, so that a few finite entries left near zero are judged
    against the size of the result rather than their own. ``oracle`` names where ``expected`` comes from."""
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    got_class, expected_class = classes(got), classes(expected)
    wrong = got_class != expected_class
    if nan == "spreads":
        wrong &= got_class != NAN
    if wrong.any():
        positions = np.argwhere(wrong)
        shown = "; ".join(f"{tuple(int(i) for i in p)}: {float(got[tuple(p)])}, expected {float(expected[tuple(p)])}" for p in positions[:6])
        more = f" (and {len(positions) - 6} more)" if len(positions) > 6 else ""
        return f"{len(positions)} of {got.size} entries not {'' if nan == 'exact' else 'NaN or '}as {oracle} has them: {shown}{more}"
    finite = (got_class == FINITE) & (expected_class == FINITE)
    if not finite.any():
        return ""
    difference = got.astype(np.float64)[finite] - expected[finite]
    norm = max(float(np.linalg.norm(expected[finite])), math.sqrt(int(finite.sum())) * scale, np.finfo(np.float64).tiny)
    error = float(np.linalg.norm(difference)) / norm
    return "" if error <= tolerance else f"finite entries: relative error {error:.3g} > {tolerance:g}"
