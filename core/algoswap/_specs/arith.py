"""Elementwise arithmetic: sub, mul, div with NumPy broadcasting, neg, sqrt, rsqrt, the ops with a
scalar constant (add_scalar, mul_scalar, rdiv_scalar, pow_scalar, clamp_min), zeros_like and ones_like, and
the gradient ops they need. ``add`` lives in elementwise.py; reductions to a broadcast operand's
shape use ``sum_to_shape`` (reduce.py).

A scalar constant is an attribute of its own op (``mul_scalar(x, value=2.0)``) rather than an
optional scalar input of ``mul``: each op keeps one shape rule and one signature, a backend can
serve the scalar form without serving broadcasting, and the constant is part of the validated call.
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import real, shape
from .elementwise import broadcast_shape
from .shape import any_dtype

_FAMILY = "elementwise"
_SHAPE = Attr("shape", convert=shape, doc="the shape of the operand this gradient is for")


def _binary_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    return broadcast_shape(shapes["a"], shapes["b"])


def _shape_of(name: str) -> Any:
    return lambda call: {"shape": call.shape(name)}


def _binary(name: str, doc: str, gradients: tuple[GradRule, ...]) -> OpSpec:
    return OpSpec(name, (Input("a"), Input("b")), (), shape_rule=_binary_shape, family=_FAMILY, gradients=gradients, doc=doc)


def _reduces_to(target: Shape, full: Shape, name: str = "grad_output") -> Shape:
    """Check that ``target`` broadcasts to ``full`` (so that ``full`` sums back down to it)."""
    try:
        ok = broadcast_shape(target, full) == full
    except InvalidSpec:
        ok = False
    if not ok:
        raise InvalidSpec(name, f"shape {full}", f"a shape that 'shape' {target} broadcasts to")
    return target


def _grad_with_other(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """grad_output has the broadcast shape of the operand (attribute 'shape') and 'other'."""
    try:
        full = broadcast_shape(attrs["shape"], shapes["other"])
    except InvalidSpec:
        raise InvalidSpec("shape", attrs["shape"], f"a shape broadcastable with 'other' {shapes['other']}") from None
    if shapes["grad_output"] != full:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{full}, the broadcast of 'shape' {attrs['shape']} and 'other' {shapes['other']}")
    return attrs["shape"]


def _div_grad_b_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    if attrs["shape"] != shapes["b"]:
        raise InvalidSpec("shape", attrs["shape"], f"the shape {shapes['b']} of 'b'")
    full = broadcast_shape(shapes["a"], shapes["b"])
    if shapes["grad_output"] != full:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{full}, the broadcast of 'a' and 'b'")
    return shapes["b"]


sub = _binary("sub", "a - b elementwise with NumPy broadcasting.", (
    GradRule("a", "sum_to_shape", attrs=_shape_of("a")), GradRule("b", "sub_grad_b", attrs=_shape_of("b")),
))
sub_grad_b = OpSpec(
    "sub_grad_b", (Input("grad_output"),), (_SHAPE,),
    shape_rule=lambda shapes, attrs: _reduces_to(attrs["shape"], shapes["grad_output"]),
    family=_FAMILY, grad_of="sub", empty_fill=0.0, doc="Gradient of sub with respect to b: -grad_output summed down to b's shape.",
)
mul = _binary("mul", "a * b elementwise with NumPy broadcasting.", (
    GradRule("a", "mul_grad", ("grad_output", "b"), _shape_of("a")),
    GradRule("b", "mul_grad", ("grad_output", "a"), _shape_of("b")),
))
mul_grad = OpSpec(
    "mul_grad", (Input("grad_output"), Input("other")), (_SHAPE,), shape_rule=_grad_with_other, family=_FAMILY,
    grad_of="mul", empty_fill=0.0, doc="Gradient of mul with respect to one operand: grad_output * other, summed down to 'shape'.",
)
div = _binary("div", "a / b elementwise with NumPy broadcasting.", (
    GradRule("a", "div_grad_a", ("grad_output", "b"), _shape_of("a")),
    GradRule("b", "div_grad_b", ("grad_output", "a", "b"), _shape_of("b")),
))
div_grad_a = OpSpec(
    "div_grad_a", (Input("grad_output"), Input("other")), (_SHAPE,), shape_rule=_grad_with_other, family=_FAMILY,
    grad_of="div", empty_fill=0.0, doc="Gradient of div with respect to a: grad_output / b (given as 'other'), summed down to a's shape.",
)
div_grad_b = OpSpec(
    "div_grad_b", (Input("grad_output"), Input("a"), Input("b")), (_SHAPE,), shape_rule=_div_grad_b_shape,
    family=_FAMILY, grad_of="div", empty_fill=0.0, doc="Gradient of div with respect to b: -grad_output * a / b**2, summed down to b's shape.",
)

# ---------------------------------------------------------------------------------- unary


def _same_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """Gradient ops of unary ops: grad_output and the other array share one shape."""
    other = "output" if "output" in shapes else "input"
    if shapes["grad_output"] != shapes[other]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes[other]} like '{other}'")
    return shapes[other]


def _unary(name: str, doc: str, gradient: GradRule | None, attrs: tuple[Attr, ...] = ()) -> OpSpec:
    return OpSpec(
        name, (Input("input"),), attrs, shape_rule=lambda shapes, attrs: shapes["input"], family=_FAMILY,
        gradients=() if gradient is None else (gradient,), doc=doc,
    )


def _unary_grad(name: str, second: str, doc: str, attrs: tuple[Attr, ...] = ()) -> OpSpec:
    return OpSpec(
        f"{name}_grad", (Input("grad_output"), Input(second)), attrs, shape_rule=_same_shape, family=_FAMILY,
        grad_of=name, doc=doc,
    )


def _same_attrs(call: OpCall) -> dict[str, Any]:
    return dict(call.attrs)


_VALUE = (Attr("value", convert=real(), doc="the scalar constant"),)
_EXPONENT = (Attr("exponent", convert=real(), doc="the constant exponent"),)

neg = _unary("neg", "-input elementwise.", GradRule("input", "neg"))
sqrt = _unary("sqrt", "Square root elementwise (NaN below 0).", GradRule("input", "sqrt_grad", ("grad_output", "output")))
sqrt_grad = _unary_grad("sqrt", "output", "Gradient of sqrt from its output y: grad_output / (2 y).")
rsqrt = _unary("rsqrt", "1 / sqrt(input) elementwise.", GradRule("input", "rsqrt_grad", ("grad_output", "output")))
rsqrt_grad = _unary_grad("rsqrt", "output", "Gradient of rsqrt from its output y: -grad_output * y**3 / 2.")
add_scalar = _unary("add_scalar", "input + value (subtract with a negative value).", GradRule("input", None), _VALUE)
mul_scalar = _unary(
    "mul_scalar", "input * value (divide by c with value=1/c).", GradRule("input", "mul_scalar", attrs=_same_attrs), _VALUE,
)
rdiv_scalar = _unary(
    "rdiv_scalar", "value / input elementwise.", GradRule("input", "rdiv_scalar_grad", ("grad_output", "input"), _same_attrs), _VALUE,
)
rdiv_scalar_grad = _unary_grad("rdiv_scalar", "input", "Gradient of rdiv_scalar: -grad_output * value / input**2.", _VALUE)
pow_scalar = _unary(
    "pow_scalar", "input ** exponent elementwise (NaN for a negative input and a non-integer exponent).",
    GradRule("input", "pow_scalar_grad", ("grad_output", "input"), _same_attrs), _EXPONENT,
)
pow_scalar_grad = _unary_grad(
    "pow_scalar", "input", "Gradient of pow_scalar: grad_output * exponent * input**(exponent - 1).", _EXPONENT,
)
clamp_min = _unary(
    "clamp_min", "max(input, value) elementwise (NaN stays NaN), like torch.clamp_min; F.normalize's floor of the norm.",
    GradRule("input", "clamp_min_grad", ("grad_output", "input"), _same_attrs), _VALUE,
)
clamp_min_grad = _unary_grad(
    "clamp_min", "input", "Gradient of clamp_min: grad_output where input >= value, else 0 (at NaN too, as in PyTorch).", _VALUE,
)


def _constant(name: str, doc: str) -> OpSpec:
    return OpSpec(
        name, (Input("input"),), (), shape_rule=lambda shapes, attrs: shapes["input"], dtype_rule=any_dtype,
        family=_FAMILY, doc=doc,
    )


zeros_like = _constant("zeros_like", "An array of zeros with the input's shape and dtype (no gradient flows).")
ones_like = _constant("ones_like", "An array of ones with the input's shape and dtype (no gradient flows).")

SPECS = (
    sub, sub_grad_b, mul, mul_grad, div, div_grad_a, div_grad_b,
    neg, sqrt, sqrt_grad, rsqrt, rsqrt_grad,
    add_scalar, mul_scalar, rdiv_scalar, rdiv_scalar_grad, pow_scalar, pow_scalar_grad, clamp_min, clamp_min_grad,
    zeros_like, ones_like,
)
