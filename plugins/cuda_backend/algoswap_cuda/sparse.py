"""CSR products on cuSPARSE through cupyx.scipy.sparse: csrmv, csrmm and csrmm's dense gradient.
A scipy.sparse CSR matrix from the host becomes a cupyx CSR matrix (see _runtime.from_host)."""

from __future__ import annotations

from typing import Any

import cupy as cp


def _op(matrix: Any, transposed: bool) -> Any:
    return matrix.T if transposed else matrix


def csrmv(matrix: Any, vector: Any, *, trans: bool) -> Any:
    return cp.asarray(_op(matrix, trans) @ vector, dtype=vector.dtype)


def csrmm(matrix: Any, dense: Any, *, trans_a: bool, trans_b: bool) -> Any:
    dense = cp.ascontiguousarray(dense.T) if trans_b else dense
    return cp.ascontiguousarray(_op(matrix, trans_a) @ dense, dtype=dense.dtype)


def csrmm_grad_dense(matrix: Any, dy: Any, *, trans_a: bool, trans_b: bool) -> Any:
    """op(matrix)^T @ dy, transposed when trans_b."""
    grad = _op(matrix, not trans_a) @ dy
    return cp.ascontiguousarray(grad.T if trans_b else grad, dtype=dy.dtype)
