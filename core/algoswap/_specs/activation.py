"""Elementwise activations and their gradients."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import GradRule, Input, OpSpec, Shape

_ANY_RANK = tuple(range(1, 9))


def _same_shapes(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    if shapes["grad_output"] != shapes["input"]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes['input']} like 'input'")
    return shapes["input"]


relu = OpSpec(
    "relu",
    (Input("input", _ANY_RANK),),
    (),
    shape_rule=lambda shapes, attrs: shapes["input"],
    family="activation",
    gradients=(GradRule("input", "relu_grad", ("grad_output", "input")),),
    doc="max(input, 0) elementwise.",
)
relu_grad = OpSpec(
    "relu_grad",
    (Input("grad_output", _ANY_RANK), Input("input", _ANY_RANK)),
    (),
    shape_rule=_same_shapes,
    family="activation",
    grad_of="relu",
    doc="grad_output where input > 0, else 0.",
)

SPECS = (relu, relu_grad)
