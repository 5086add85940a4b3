"""softmax and log_softmax along one axis, and their gradients."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from ._geometry import ANY_RANK
from .._spec import Attr, GradRule, Input, OpSpec, Shape
from ._convert import integer

_AXIS = (Attr("axis", -1, integer(), "the dimension to normalise over (negative counts from the end)"),)


def _resolve_axis(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    first = "grad_output" if "grad_output" in shapes else "input"
    rank, axis = len(shapes[first]), attrs["axis"]
    if not -rank <= axis < rank:
        raise InvalidSpec("axis", axis, f"a dimension in [{-rank}, {rank - 1}] for a {rank}-D '{first}'")
    return {"axis": axis % rank}


def _grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    if shapes["grad_output"] != shapes["output"]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes['output']} like 'output'")
    return shapes["output"]


def _forward(name: str, doc: str) -> OpSpec:
    return OpSpec(
        name,
        (Input("input", ANY_RANK),),
        _AXIS,
        shape_rule=lambda shapes, attrs: shapes["input"],
        resolve=_resolve_axis,
        family="softmax",
        gradients=(GradRule("input", f"{name}_grad", ("grad_output", "output"), lambda c: {"axis": c.attrs["axis"]}),),
        doc=doc,
    )


def _gradient(name: str, doc: str) -> OpSpec:
    return OpSpec(
        f"{name}_grad",
        (Input("grad_output", ANY_RANK), Input("output", ANY_RANK)),
        _AXIS,
        shape_rule=_grad_shape,
        resolve=_resolve_axis,
        family="softmax",
        grad_of=name,
        doc=doc,
    )


softmax = _forward("softmax", "exp(input) / sum(exp(input)) along axis (max subtracted first), like torch.softmax.")
softmax_grad = _gradient("softmax", "Gradient of softmax from its output y: y * (grad_output - sum(grad_output * y, axis)).")
log_softmax = _forward("log_softmax", "input - logsumexp(input) along axis, like torch.log_softmax.")
log_softmax_grad = _gradient(
    "log_softmax", "Gradient of log_softmax from its output y: grad_output - exp(y) * sum(grad_output, axis).",
)

SPECS = (softmax, softmax_grad, log_softmax, log_softmax_grad)
