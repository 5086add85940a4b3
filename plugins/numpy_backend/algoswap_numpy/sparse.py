"""Reference CSR products: csrmv, csrmm and csrmm's gradient with respect to the dense operand.

The matrix is a scipy.sparse CSR matrix; scipy's products keep its row-compressed form.
"""

from typing import Any

import numpy as np


def _op(matrix: Any, transposed: bool) -> Any:
    return matrix.T if transposed else matrix


def csrmv(matrix: Any, vector: np.ndarray, *, trans: bool) -> np.ndarray:
    return np.asarray(_op(matrix, trans) @ vector, dtype=vector.dtype)


def csrmm(matrix: Any, dense: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return np.ascontiguousarray(_op(matrix, trans_a) @ (dense.T if trans_b else dense), dtype=dense.dtype)


def csrmm_grad_dense(matrix: Any, dy: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(matrix)^T @ dy, transposed when trans_b."""
    grad = _op(matrix, not trans_a) @ dy
    return np.ascontiguousarray(grad.T if trans_b else grad, dtype=dy.dtype)
