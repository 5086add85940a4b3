"""Reference one_hot, where, and embedding lookup with its dense gradient."""

import numpy as np
from algoswap import OpArgumentError


def check_indices(op: str, name: str, indices: np.ndarray, limit: int) -> None:
    """Indices are data, so their range is checked when the op runs."""
    if indices.size and (indices.min() < 0 or indices.max() >= limit):
        given = f"values in [{indices.min()}, {indices.max()}]"
        raise OpArgumentError(op, name, given, f"values in [0, {limit - 1}]")


def one_hot(indices: np.ndarray, *, num_classes: int, dtype: str) -> np.ndarray:
    check_indices("one_hot", "indices", indices, num_classes)
    return np.eye(num_classes, dtype=dtype)[indices]


def where(condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(condition, x, y)


def where_grad(dy: np.ndarray, condition: np.ndarray, *, branch: str) -> np.ndarray:
    zero = np.zeros((), dtype=dy.dtype)
    return np.where(condition, dy, zero) if branch == "x" else np.where(condition, zero, dy)


def embedding(weight: np.ndarray, indices: np.ndarray) -> np.ndarray:
    check_indices("embedding", "indices", indices, weight.shape[0])
    return weight[indices]


def embedding_grad(dy: np.ndarray, indices: np.ndarray, *, num_embeddings: int) -> np.ndarray:
    """Each row of dy added to the row of the table its index names (repeats add up)."""
    check_indices("embedding_grad", "indices", indices, num_embeddings)
    grad = np.zeros((num_embeddings, dy.shape[-1]), dtype=dy.dtype)
    np.add.at(grad, indices.reshape(-1), dy.reshape(-1, dy.shape[-1]))
    return grad
