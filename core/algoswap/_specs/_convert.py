"""Attribute converters: validate a value, return its canonical form, or raise ValueError(expected)."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable, TypeVar

Converter = TypeVar("Converter", bound=Callable[..., Any])
INT_MAX = 2**31 - 1  # the largest size, stride or count every backend's kernels take (32-bit ints)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def bounded(values: Iterable[Any], what: str) -> None:
    """Refuse ints beyond 32 bits (``ValueError`` saying so): every backend can take the rest."""
    if any(v is not None and abs(v) > INT_MAX for v in values):
        raise ValueError(f"{what}, each at most {INT_MAX} (2**31 - 1: backends' kernels take 32-bit ints)")


def expecting(what: str) -> Callable[[Converter], Converter]:
    """Mark a converter with ``what`` it accepts (the text of its ValueError), for people to read
    (``OpSpec.describe``, ``algoswap ops NAME``)."""

    def mark(convert: Converter) -> Converter:
        convert.expected = what  # type: ignore[attr-defined]
        return convert

    return mark


def expected(convert: Callable[[Any], Any]) -> str:
    """What ``convert`` accepts, if it says (see ``expecting``); "" otherwise."""
    return str(getattr(convert, "expected", ""))


def integer(minimum: int | None = None) -> Callable[[Any], int]:
    """An int, at least `minimum`."""
    what = "an int" if minimum is None else f"an int >= {minimum}"

    @expecting(what)
    def convert(value: Any) -> int:
        if not _is_int(value) or (minimum is not None and value < minimum):
            raise ValueError(what)
        bounded((value,), what)
        return int(value)

    return convert


def pair(minimum: int) -> Callable[[Any], tuple[int, int]]:
    """An int or a pair of ints, each at least `minimum`; canonical form: a pair."""
    what = f"an int >= {minimum} or a pair of them"

    @expecting(what)
    def convert(value: Any) -> tuple[int, int]:
        if _is_int(value):
            value = (value, value)
        if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(_is_int(v) for v in value):
            raise ValueError(what)
        if min(value) < minimum:
            raise ValueError(what)
        bounded(value, what)
        return (int(value[0]), int(value[1]))

    return convert


def optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """None, or whatever `convert` accepts."""

    @expecting(f"None or {expected(convert)}" if expected(convert) else "")
    def convert_optional(value: Any) -> Any:
        if value is None:
            return None
        try:
            return convert(value)
        except ValueError as exc:
            raise ValueError(f"None or {exc}") from None

    return convert_optional


@expecting("True or False")
def boolean(value: Any) -> bool:
    """True or False (ints and strings are refused so that typos are caught)."""
    if not isinstance(value, bool):
        raise ValueError(expected(boolean))
    return value


def choice(*options: str) -> Callable[[Any], str]:
    """One of the given strings."""
    what = "one of " + ", ".join(repr(o) for o in options)

    @expecting(what)
    def convert(value: Any) -> str:
        if value not in options:
            raise ValueError(what)
        return str(value)

    return convert


@expecting("'same', 'valid', an int >= 0, a pair (h, w) or ((top, bottom), (left, right))")
def conv_padding(value: Any) -> str | tuple[int, int] | tuple[tuple[int, int], tuple[int, int]]:
    """'same', 'valid', an int, a pair (h, w), or explicit ((top, bottom), (left, right))."""
    what = expected(conv_padding)
    if isinstance(value, str):
        if value not in ("same", "valid"):
            raise ValueError(what)
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, (tuple, list)) for v in value):
        try:
            return (pair(0)(tuple(value[0])), pair(0)(tuple(value[1])))
        except ValueError:
            raise ValueError(what) from None
    try:
        return pair(0)(value)
    except ValueError:
        raise ValueError(what) from None


@expecting("an int >= 1 or a pair of ints >= 1 / None")
def output_size(value: Any) -> tuple[int | None, int | None]:
    """An int, or a pair whose entries are ints >= 1 or None (None keeps the input size)."""
    what = expected(output_size)
    if _is_int(value):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(what)
    for entry in value:
        if entry is not None and (not _is_int(entry) or entry < 1):
            raise ValueError(what)
    bounded(value, what)
    return (None if value[0] is None else int(value[0]), None if value[1] is None else int(value[1]))


def real(minimum: float | None = None, maximum: float | None = None, *, open_min: bool = False,
         open_max: bool = False, finite: bool = True) -> Callable[[Any], float]:
    """A finite real number (not a bool) within the given bounds (``finite=False``: any, infinities and NaN
    too, as a fill value may be); canonical form: a float."""
    bounds = []
    if minimum is not None:
        bounds.append(f"{'>' if open_min else '>='} {minimum:g}")
    if maximum is not None:
        bounds.append(f"{'<' if open_max else '<='} {maximum:g}")
    what = ("a finite real number" if finite else "a real number (inf, -inf or nan too)") + \
        (f" {' and '.join(bounds)}" if bounds else "")

    @expecting(what)
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or (finite and not math.isfinite(value)):
            raise ValueError(what)
        value = float(value)
        if minimum is not None and (value < minimum or (open_min and value == minimum)):
            raise ValueError(what)
        if maximum is not None and (value > maximum or (open_max and value == maximum)):
            raise ValueError(what)
        return float(value)

    return convert


@expecting("a shape: an int >= 0 or a tuple of them")
def shape(value: Any) -> tuple[int, ...]:
    """A shape of any rank (an int or a tuple of ints >= 0; () is a scalar's shape)."""
    what = expected(shape)
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) and v >= 0 for v in value):
        raise ValueError(what)
    bounded(value, what)
    return tuple(int(v) for v in value)


@expecting("None, an int or a tuple of ints")
def axes(value: Any) -> tuple[int, ...] | None:
    """None (every axis), an int, or a tuple of distinct ints (negative counts from the end)."""
    what = expected(axes)
    if value is None:
        return None
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
        raise ValueError(what)
    bounded(value, what)
    return tuple(int(v) for v in value)
