"""linear and its gradients."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from ._geometry import ANY_RANK
from .._spec import GradRule, Input, OpSpec, Shape


def _linear_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    x, w, b = shapes["input"], shapes["weight"], shapes["bias"]
    if x[-1] != w[1]:
        raise InvalidSpec("weight", f"shape {w}", f"(out_features, {x[-1]}) to match the input's last dimension")
    if b is not None and b != (w[0],):
        raise InvalidSpec("bias", f"shape {b}", f"({w[0]},), one per output feature")
    return x[:-1] + (w[0],)


def _grad_input_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    dy, w = shapes["grad_output"], shapes["weight"]
    if dy[-1] != w[0]:
        raise InvalidSpec("weight", f"shape {w}", f"({dy[-1]}, in_features) to match grad_output's last dimension")
    return dy[:-1] + (w[1],)


def _grad_weight_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    dy, x = shapes["grad_output"], shapes["input"]
    if dy[:-1] != x[:-1]:
        raise InvalidSpec("input", f"shape {x}", f"leading dimensions {dy[:-1]} like grad_output")
    return (dy[-1], x[-1])



linear = OpSpec(
    "linear",
    (Input("input", ANY_RANK), Input("weight", (2,)), Input("bias", (1,), optional=True)),
    (),
    shape_rule=_linear_shape,
    family="linear",
    empty_fill=lambda shapes, attrs: 0.0 if shapes["bias"] is None else None,  # no input feature: x @ W.T is 0
    gradients=(
        GradRule("input", "linear_grad_input", ("grad_output", "weight")),
        GradRule("weight", "linear_grad_weight", ("grad_output", "input")),
        GradRule("bias", "linear_grad_bias"),
    ),
    doc="input @ weight.T + bias over the last dimension, any number of leading dimensions.",
)
linear_grad_input = OpSpec(
    "linear_grad_input",
    (Input("grad_output", ANY_RANK), Input("weight", (2,))),
    (),
    shape_rule=_grad_input_shape,
    family="linear",
    grad_of="linear",
    empty_fill=0.0,
    doc="Gradient of linear with respect to its input: grad_output @ weight.",
)
linear_grad_weight = OpSpec(
    "linear_grad_weight",
    (Input("grad_output", ANY_RANK), Input("input", ANY_RANK)),
    (),
    shape_rule=_grad_weight_shape,
    family="linear",
    grad_of="linear",
    empty_fill=0.0,
    doc="Gradient of linear with respect to its weight, summed over the leading dimensions.",
)
linear_grad_bias = OpSpec(
    "linear_grad_bias",
    (Input("grad_output", ANY_RANK),),
    (),
    shape_rule=lambda shapes, attrs: (shapes["grad_output"][-1],),
    family="linear",
    grad_of="linear",
    empty_fill=0.0,
    doc="Gradient of linear with respect to its bias: grad_output summed over the leading dimensions.",
)

SPECS = (linear, linear_grad_input, linear_grad_weight, linear_grad_bias)
