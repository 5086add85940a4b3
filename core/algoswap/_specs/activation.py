"""Elementwise activations and their gradients."""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._errors import InvalidSpec
from ._geometry import ANY_RANK
from .._spec import Attr, GradRule, Input, OpSpec, Shape



def _same_shapes(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """Gradient ops of elementwise ops: grad_output and the other array share one shape."""
    other = "output" if "output" in shapes else "input"
    if shapes["grad_output"] != shapes[other]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes[other]} like '{other}'")
    return shapes[other]


def _finite_real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError("a finite real number")
    return float(value)


def _elementwise(name: str, doc: str, gradient: GradRule, attrs: tuple[Attr, ...] = ()) -> OpSpec:
    return OpSpec(
        name, (Input("input", ANY_RANK),), attrs,
        shape_rule=lambda shapes, attrs: shapes["input"], family="activation", gradients=(gradient,), doc=doc,
    )


def _gradient(name: str, second: str, doc: str, attrs: tuple[Attr, ...] = ()) -> OpSpec:
    return OpSpec(
        f"{name}_grad", (Input("grad_output", ANY_RANK), Input(second, ANY_RANK)), attrs,
        shape_rule=_same_shapes, family="activation", grad_of=name, doc=doc,
    )


_SLOPE = (Attr("negative_slope", 0.01, _finite_real, "the slope for input < 0"),)

relu = _elementwise("relu", "max(input, 0) elementwise.", GradRule("input", "relu_grad", ("grad_output", "input")))
relu_grad = _gradient("relu", "input", "grad_output where input > 0, else 0.")

sigmoid = _elementwise(
    "sigmoid", "1 / (1 + exp(-input)) elementwise, like torch.sigmoid.",
    GradRule("input", "sigmoid_grad", ("grad_output", "output")),
)
sigmoid_grad = _gradient("sigmoid", "output", "Gradient of sigmoid from its output y: grad_output * y * (1 - y).")

tanh = _elementwise(
    "tanh", "Hyperbolic tangent elementwise, like torch.tanh.",
    GradRule("input", "tanh_grad", ("grad_output", "output")),
)
tanh_grad = _gradient("tanh", "output", "Gradient of tanh from its output y: grad_output * (1 - y * y).")

leaky_relu = _elementwise(
    "leaky_relu", "input where input > 0, else negative_slope * input, like torch.nn.functional.leaky_relu.",
    GradRule("input", "leaky_relu_grad", ("grad_output", "input"), lambda c: dict(c.attrs)),
    _SLOPE,
)
leaky_relu_grad = _gradient(
    "leaky_relu", "input", "Gradient of leaky_relu: grad_output where input > 0, else negative_slope * grad_output.", _SLOPE,
)

SPECS = (relu, relu_grad, sigmoid, sigmoid_grad, tanh, tanh_grad, leaky_relu, leaky_relu_grad)
