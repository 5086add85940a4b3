"""CSR products: csrmv on cuSPARSE through cupyx.scipy.sparse; csrmm and csrmm's dense gradient by our
kernel (_kernels.CSRMM). A scipy.sparse CSR matrix from the host becomes a cupyx CSR matrix (see
_runtime.from_host)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from . import _kernels, _runtime
from ._runtime import dtype_name


def _op(matrix: Any, transposed: bool) -> Any:
    return matrix.T if transposed else matrix


def _csr(matrix: Any, transposed: bool) -> Any:
    """op(matrix) as a CSR matrix (the transpose by a CSC-to-CSR conversion, which only moves entries)."""
    return matrix.T.tocsr() if transposed else matrix


# _kernels.CSRMM for each index type (cupyx keeps int32 indices where they fit)
_SOURCES = {index: f"typedef {ctype} I;\n{_kernels.CSRMM}" for index, ctype in (("int32", "int"), ("int64", "long long"))}


def _product(matrix: Any, dense: Any) -> Any:
    """matrix (CSR) @ dense, summing the stored entries of each row only (one thread per output)."""
    dense = _runtime.contiguous(dense)
    out = cp.empty((matrix.shape[0], dense.shape[1]), dtype=dense.dtype)
    index = matrix.indices.dtype
    arrays = (matrix.indptr.astype(index, copy=False), matrix.indices, matrix.data.astype(dense.dtype, copy=False), dense, out)
    _kernels.launch(_SOURCES[index.name], "csrmm", dtype_name(dense.dtype), out.size, arrays, None, *out.shape)
    return out


def csrmv(matrix: Any, vector: Any, *, trans: bool) -> Any:
    return cp.asarray(_op(matrix, trans) @ vector, dtype=vector.dtype)


def csrmm(matrix: Any, dense: Any, *, trans_a: bool, trans_b: bool) -> Any:
    return _product(_csr(matrix, trans_a), dense.T if trans_b else dense)


def csrmm_grad_dense(matrix: Any, dy: Any, *, trans_a: bool, trans_b: bool) -> Any:
    """op(matrix)^T @ dy, transposed when trans_b."""
    grad = _product(_csr(matrix, not trans_a), dy)
    return cp.ascontiguousarray(grad.T) if trans_b else grad
