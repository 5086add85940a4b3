"""concat (one kernel launch for up to ``_passes.MOST_INPUTS`` inputs), flatten and reshape on CuPy arrays."""

from __future__ import annotations

from typing import Any

from . import _passes


def concat(*inputs: Any, axis: int) -> Any:
    return _passes.concat(inputs, axis)


def flatten(x: Any, *, start_dim: int, end_dim: int) -> Any:
    if x.ndim == 0:
        return x.reshape(1)
    return x.reshape(x.shape[:start_dim] + (-1,) + x.shape[end_dim + 1:])


def reshape(x: Any, *, shape: tuple[int, ...]) -> Any:
    return x.reshape(shape)
