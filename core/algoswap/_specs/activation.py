"""Elementwise activations and their gradients."""

from __future__ import annotations

import math
import numbers
from dataclasses import replace
from typing import Any

from .._errors import InvalidSpec
from ._convert import choice, expected, expecting
from ._geometry import ANY_RANK
from .._spec import Attr, GradRule, Input, OpSpec, Shape


def _same_shapes(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """Gradient ops of elementwise ops: grad_output and the other array share one shape."""
    other = "output" if "output" in shapes else "input"
    if shapes["grad_output"] != shapes[other]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes[other]} like '{other}'")
    return shapes[other]


@expecting("a finite real number")
def _finite_real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(expected(_finite_real))
    return float(value)


def _ordered_bounds(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """hardtanh's bounds: min_val <= max_val (torch refuses the others)."""
    if attrs["min_val"] > attrs["max_val"]:
        raise InvalidSpec("max_val", attrs["max_val"], f"a value >= min_val ({attrs['min_val']})")
    return attrs


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


def _from_input(name: str, doc: str, grad_doc: str, attrs: tuple[Attr, ...] = ()) -> tuple[OpSpec, OpSpec]:
    """An activation and its gradient op, which reads the forward input and takes the forward op's attributes."""
    rule = GradRule("input", f"{name}_grad", ("grad_output", "input"), lambda c: dict(c.attrs))
    return _elementwise(name, doc, rule, attrs), _gradient(name, "input", grad_doc, attrs)


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

_BOUNDS = (Attr("min_val", -1.0, _finite_real, "the lower bound"), Attr("max_val", 1.0, _finite_real, "the upper bound"))
_APPROXIMATE = (Attr("approximate", "none", choice("none", "tanh"), "'none': the exact erf form; 'tanh': the tanh approximation"),)
_ALPHA = (Attr("alpha", 1.0, _finite_real, "the value approached as input -> -inf is -alpha"),)

hardtanh, hardtanh_grad = (replace(spec, resolve=_ordered_bounds) for spec in _from_input(
    "hardtanh", "input clamped to [min_val, max_val] elementwise (NaN stays NaN), like torch.nn.functional.hardtanh; "
    "ReLU6 is hardtanh(min_val=0, max_val=6).",
    "Gradient of hardtanh: grad_output where min_val < input < max_val, else 0 (at either bound and at NaN too, as in PyTorch).",
    _BOUNDS,
))
silu, silu_grad = _from_input(
    "silu", "input * sigmoid(input) elementwise (swish), like torch.nn.functional.silu.",
    "Gradient of silu: grad_output * s * (1 + input * (1 - s)), s = sigmoid(input).",
)
gelu, gelu_grad = _from_input(
    "gelu", "input * Phi(input), Phi the standard normal CDF (approximate='none': 0.5 * (1 + erf(input / sqrt(2)))), "
    "or its tanh approximation 0.5 * input * (1 + tanh(sqrt(2/pi) * (input + 0.044715 input^3))) (approximate='tanh'), "
    "like torch.nn.functional.gelu.",
    "Gradient of gelu (of the form approximate names).", _APPROXIMATE,
)
hardswish, hardswish_grad = _from_input(
    "hardswish", "input * hardtanh(input + 3, 0, 6) / 6 elementwise, like torch.nn.functional.hardswish.",
    "Gradient of hardswish: 0 where input <= -3, grad_output where input >= 3, else grad_output * (input / 3 + 0.5) "
    "(as PyTorch has it at the kinks; NaN where input is NaN).",
)
hardsigmoid, hardsigmoid_grad = _from_input(
    "hardsigmoid", "hardtanh(input + 3, 0, 6) / 6 elementwise, like torch.nn.functional.hardsigmoid.",
    "Gradient of hardsigmoid: grad_output / 6 where -3 < input < 3, else 0 (at NaN too, as in PyTorch).",
)
elu, elu_grad = _from_input(
    "elu", "input where input > 0, else alpha * (exp(input) - 1), like torch.nn.functional.elu.",
    "Gradient of elu: grad_output where input > 0, else grad_output * alpha * exp(input) (alpha * grad_output at 0, NaN "
    "where input is NaN).", _ALPHA,
)
mish, mish_grad = _from_input(
    "mish", "input * tanh(softplus(input)), softplus(x) = log(1 + exp(x)), like torch.nn.functional.mish.",
    "Gradient of mish: grad_output * (t + input * sigmoid(input) * (1 - t * t)), t = tanh(softplus(input)).",
)

SPECS = (relu, relu_grad, sigmoid, sigmoid_grad, tanh, tanh_grad, leaky_relu, leaky_relu_grad,
         hardtanh, hardtanh_grad, silu, silu_grad, gelu, gelu_grad, hardswish, hardswish_grad,
         hardsigmoid, hardsigmoid_grad, elu, elu_grad, mish, mish_grad)
