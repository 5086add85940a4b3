"""Products of a sparse CSR matrix (a ``scipy.sparse`` csr_matrix or csr_array) with a dense vector
(csrmv) or matrix (csrmm), and their gradients with respect to the dense operand (the sparse
matrix is data here: no gradient). Shape and dtype rules see the CSR matrix's shape and dtype."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import boolean

_CSR = Input("matrix", (2,), format="csr", doc="a scipy.sparse CSR matrix")
_TRANS_A = Attr("trans_a", False, boolean, "use the transposed sparse matrix")
_TRANS_B = Attr("trans_b", False, boolean, "use the transposed dense matrix")


def _op_shape(matrix: Shape, transposed: bool) -> tuple[int, int]:
    return (matrix[1], matrix[0]) if transposed else (matrix[0], matrix[1])


def _csrmv_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    rows, cols = _op_shape(shapes["matrix"], attrs["trans"])
    if shapes["vector"] != (cols,):
        raise InvalidSpec("vector", f"shape {shapes['vector']}", f"({cols},) for the {'transposed ' if attrs['trans'] else ''}matrix {shapes['matrix']}")
    return (rows,)


def _flip(call: OpCall) -> dict[str, Any]:
    return {"trans": not call.attrs["trans"]}


csrmv = OpSpec(
    "csrmv", (_CSR, Input("vector", (1,))), (Attr("trans", False, boolean, "use the transposed matrix"),),
    shape_rule=_csrmv_shape, family="sparse", empty_fill=0.0,
    gradients=(GradRule("vector", "csrmv", ("matrix", "grad_output"), _flip),),
    doc="op(matrix) @ vector for a CSR matrix (op transposes when trans); the gradient with respect to the "
    "vector is csrmv with the other trans.",
)


def _csrmm_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    rows, inner = _op_shape(shapes["matrix"], attrs["trans_a"])
    inner_b, cols = _op_shape(shapes["dense"], attrs["trans_b"])
    if inner != inner_b:
        raise InvalidSpec("dense", f"shape {shapes['dense']}", f"{inner} rows in op(dense) to match the {inner} columns of op(matrix) {shapes['matrix']} (trans_a={attrs['trans_a']}, trans_b={attrs['trans_b']})")
    return (rows, cols)


def _csrmm_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    rows, inner = _op_shape(shapes["matrix"], attrs["trans_a"])
    dy = shapes["grad_output"]
    if dy[0] != rows:
        raise InvalidSpec("grad_output", f"shape {dy}", f"{rows} rows, like op(matrix) {shapes['matrix']}")
    return (dy[1], inner) if attrs["trans_b"] else (inner, dy[1])


csrmm = OpSpec(
    "csrmm", (_CSR, Input("dense", (2,))), (_TRANS_A, _TRANS_B),
    shape_rule=_csrmm_shape, family="sparse", empty_fill=0.0,
    gradients=(GradRule("dense", "csrmm_grad_dense", ("matrix", "grad_output"), lambda c: dict(c.attrs)),),
    doc="op(matrix) @ op(dense) for a CSR matrix and a dense 2-D array, op transposing when trans_a / trans_b.",
)
csrmm_grad_dense = OpSpec(
    "csrmm_grad_dense", (_CSR, Input("grad_output", (2,))), (_TRANS_A, _TRANS_B),
    shape_rule=_csrmm_grad_shape, family="sparse", grad_of="csrmm", empty_fill=0.0,
    doc="Gradient of csrmm with respect to the dense operand: op(matrix)^T @ grad_output (transposed if trans_b).",
)

SPECS = (csrmv, csrmm, csrmm_grad_dense)
