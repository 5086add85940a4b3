"""matmul (2-D) and batch_matmul (batch dimensions broadcast as in NumPy), each with optional
transposition of either operand, and their gradients."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import boolean, shape
from ._geometry import MAX_RANK
from .elementwise import broadcast_shape

_FAMILY = "matmul"
_TRANS = (
    Attr("trans_a", False, boolean, "use a with its last two axes swapped"),
    Attr("trans_b", False, boolean, "use b with its last two axes swapped"),
)
_BATCH_RANKS = tuple(range(3, MAX_RANK + 1))


def _rows_cols(x: Shape, transposed: bool) -> tuple[int, int]:
    return (x[-1], x[-2]) if transposed else (x[-2], x[-1])


def product_shape(a: Shape, b: Shape, attrs: dict[str, Any], a_name: str = "a", b_name: str = "b") -> Shape:
    """The shape of op(a) @ op(b): broadcast batch dimensions, then (rows of op(a), columns of op(b))."""
    m, k = _rows_cols(a, attrs["trans_a"])
    k_b, n = _rows_cols(b, attrs["trans_b"])
    if k != k_b:
        raise InvalidSpec(b_name, f"shape {b}", f"{k} rows in op(b) to match the {k} columns of op({a_name}) with shape {a} (trans_a={attrs['trans_a']}, trans_b={attrs['trans_b']})")
    try:
        batch = broadcast_shape(a[:-2], b[:-2])
    except InvalidSpec:
        raise InvalidSpec(b_name, f"shape {b}", f"batch dimensions broadcastable with those of '{a_name}' {a[:-2]}") from None
    return batch + (m, n)


def _check_grad(shapes: dict[str, Any], a: Shape, b: Shape, attrs: dict[str, Any]) -> None:
    expected = product_shape(a, b, attrs)
    if shapes["grad_output"] != expected:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, the shape of op(a) @ op(b) for a {a} and b {b}")


def _matmul_a_size(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """The 2-D case: a's shape follows from grad_output and b."""
    rows = shapes["grad_output"][0]
    inner = shapes["b"][1] if attrs["trans_b"] else shapes["b"][0]
    return (inner, rows) if attrs["trans_a"] else (rows, inner)


def _matmul_b_size(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    cols = shapes["grad_output"][1]
    inner = shapes["a"][0] if attrs["trans_a"] else shapes["a"][1]
    return (cols, inner) if attrs["trans_b"] else (inner, cols)


def _grad_a_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    a = attrs["a_size"] if "a_size" in attrs else _matmul_a_size(shapes, attrs)
    _check_grad(shapes, a, shapes["b"], attrs)
    return a


def _grad_b_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    b = attrs["b_size"] if "b_size" in attrs else _matmul_b_size(shapes, attrs)
    _check_grad(shapes, shapes["a"], b, attrs)
    return b


def _trans(call: OpCall) -> dict[str, Any]:
    return {"trans_a": call.attrs["trans_a"], "trans_b": call.attrs["trans_b"]}


def _family(name: str, ranks: tuple[int, ...], doc: str, sized: bool) -> tuple[OpSpec, OpSpec, OpSpec]:
    a_size = (Attr("a_size", convert=shape, doc="the shape of a"),) if sized else ()
    b_size = (Attr("b_size", convert=shape, doc="the shape of b"),) if sized else ()
    forward = OpSpec(
        name, (Input("a", ranks), Input("b", ranks)), _TRANS,
        shape_rule=lambda shapes, attrs: product_shape(shapes["a"], shapes["b"], attrs), family=_FAMILY,
        empty_fill=0.0,  # inner dimension 0: sums of no products
        gradients=(
            GradRule("a", f"{name}_grad_a", ("grad_output", "b"), lambda c: {**_trans(c), **({"a_size": c.shape("a")} if sized else {})}),
            GradRule("b", f"{name}_grad_b", ("grad_output", "a"), lambda c: {**_trans(c), **({"b_size": c.shape("b")} if sized else {})}),
        ),
        doc=doc,
    )
    reduce = ", summed over the batch dimensions that a broadcast" if sized else ""
    grad_a = OpSpec(
        f"{name}_grad_a", (Input("grad_output", ranks), Input("b", ranks)), _TRANS + a_size,
        shape_rule=_grad_a_shape, family=_FAMILY, grad_of=name, empty_fill=0.0,
        doc=f"Gradient of {name} with respect to a: grad_output @ op(b)^T (transposed back if trans_a){reduce}.",
    )
    grad_b = OpSpec(
        f"{name}_grad_b", (Input("grad_output", ranks), Input("a", ranks)), _TRANS + b_size,
        shape_rule=_grad_b_shape, family=_FAMILY, grad_of=name, empty_fill=0.0,
        doc=f"Gradient of {name} with respect to b: op(a)^T @ grad_output (transposed back if trans_b){reduce.replace(' a ', ' b ')}.",
    )
    return forward, grad_a, grad_b


matmul, matmul_grad_a, matmul_grad_b = _family(
    "matmul", (2,), "op(a) @ op(b) for 2-D a and b, op transposing when trans_a / trans_b.", sized=False,
)
batch_matmul, batch_matmul_grad_a, batch_matmul_grad_b = _family(
    "batch_matmul", _BATCH_RANKS,
    "op(a) @ op(b) over the last two axes of 3-D to 64-D a and b, their batch dimensions broadcast as in "
    "numpy.matmul, op transposing the last two axes when trans_a / trans_b.", sized=True,
)

SPECS = (matmul, matmul_grad_a, matmul_grad_b, batch_matmul, batch_matmul_grad_a, batch_matmul_grad_b)
