"""flatten: a new shape over the same memory (no kernel runs)."""

from __future__ import annotations

from typing import Any


def flatten(x: Any, *, start_dim: int, end_dim: int) -> Any:
    """Dimensions start_dim..end_dim merged; a host array stays a numpy view, a SyclArray a SyclArray."""
    shape = tuple(x.shape)
    merged = 1
    for size in shape[start_dim : end_dim + 1]:
        merged *= size
    return x.reshape(shape[:start_dim] + (merged,) + shape[end_dim + 1 :])
