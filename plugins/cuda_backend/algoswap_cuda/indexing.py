"""one_hot, where, and embedding lookup with its gradient (a scatter-add) on CuPy arrays. where (CuPy has no
bfloat16 loop for it) and the scatter-add run float16 and bfloat16 in float32 (``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import OpArgumentError

from ._types import in_float32


def check_indices(op: str, name: str, indices: Any, limit: int) -> None:
    """Indices are data, so their range is checked when the op runs (one device-to-host read)."""
    if indices.size:
        low, high = (int(v) for v in cp.stack([indices.min(), indices.max()]).get())
        if low < 0 or high >= limit:
            raise OpArgumentError(op, name, f"values in [{low}, {high}]", f"values in [0, {limit - 1}]")


def one_hot(indices: Any, *, num_classes: int, dtype: str) -> Any:
    check_indices("one_hot", "indices", indices, num_classes)
    return cp.eye(num_classes, dtype=dtype)[indices]


@in_float32
def where(condition: Any, x: Any, y: Any) -> Any:
    return cp.where(condition, x, y)


@in_float32
def where_grad(dy: Any, condition: Any, *, branch: str) -> Any:
    zero = cp.zeros((), dtype=dy.dtype)
    return cp.where(condition, dy, zero) if branch == "x" else cp.where(condition, zero, dy)


def embedding(weight: Any, indices: Any) -> Any:
    check_indices("embedding", "indices", indices, weight.shape[0])
    return weight[indices]


@in_float32
def embedding_grad(dy: Any, indices: Any, *, num_embeddings: int) -> Any:
    """Each row of dy added onto the row its index names (repeats add up)."""
    check_indices("embedding_grad", "indices", indices, num_embeddings)
    grad = cp.zeros((num_embeddings, dy.shape[-1]), dtype=dy.dtype)
    cp.add.at(grad, indices.reshape(-1), dy.reshape(-1, dy.shape[-1]))
    return grad
