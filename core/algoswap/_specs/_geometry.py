"""Shape arithmetic shared by several op families."""

from __future__ import annotations

from typing import Any, Callable

from ._convert import _is_int, bounded

ANY_RANK = tuple(range(1, 9))  # ranks 1 to 8: ops that take arrays of any practical rank


def shape_attr(rank: int) -> Callable[[Any], tuple[int, ...]]:
    """An attribute holding a shape of `rank` sizes (e.g. input_size of a gradient op; a batch may be 0)."""
    what = f"a shape of {rank} ints >= 0"

    def convert(value: Any) -> tuple[int, ...]:
        if not isinstance(value, (tuple, list)) or len(value) != rank:
            raise ValueError(what)
        if not all(_is_int(v) and v >= 0 for v in value):
            raise ValueError(what)
        bounded(value, what)
        return tuple(int(v) for v in value)

    return convert


def pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size: the last window must start inside the input or its left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def conv_output_size(size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int) -> int:
    """A convolution's output size along one axis (PyTorch's), < 1 where the dilated kernel does not fit."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1
