"""Reductions over axes (reduce_sum, reduce_mean, reduce_max) with their gradients, and the broadcasting
pair: broadcast_to and its adjoint sum_to_shape (the gradient of every broadcasting op's operands)."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import axes, boolean, shape
from .elementwise import broadcast_shape

_FAMILY = "reduce"
_AXES = Attr("axes", None, axes, "the axes to reduce (None: every axis; negative counts from the end)")
_KEEPDIMS = Attr("keepdims", False, boolean, "keep each reduced axis with size 1")
_INPUT_SIZE = Attr("input_size", convert=shape, doc="the shape of the forward op's input")


def _resolve_axes(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    rank = len(attrs["input_size"]) if "input_size" in attrs else len(shapes["input"])
    given = attrs["axes"]
    if given is None:
        return {**attrs, "axes": tuple(range(rank))}
    for axis in given:
        if not -rank <= axis < rank:
            raise InvalidSpec("axes", given, f"axes in [{-rank}, {rank - 1}] for a {rank}-D input")
    canonical = tuple(sorted({axis % rank for axis in given}))
    if len(canonical) != len(given):
        raise InvalidSpec("axes", given, "distinct axes")
    return {**attrs, "axes": canonical}


def reduced_shape(full: Shape, reduced: tuple[int, ...], keepdims: bool) -> Shape:
    """The shape left after reducing ``reduced`` axes of ``full``."""
    if keepdims:
        return tuple(1 if d in reduced else s for d, s in enumerate(full))
    return tuple(s for d, s in enumerate(full) if d not in reduced)


def _reduce_attrs(call: OpCall) -> dict[str, Any]:
    return {**call.attrs, "input_size": call.shape("input")}


def _grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    expected = reduced_shape(attrs["input_size"], attrs["axes"], attrs["keepdims"])
    if shapes["grad_output"] != expected:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, input_size {attrs['input_size']} reduced")
    return attrs["input_size"]


def _reduction(name: str, doc: str, grad_doc: str, empty_fill: float) -> tuple[OpSpec, OpSpec]:
    forward = OpSpec(
        name, (Input("input"),), (_AXES, _KEEPDIMS),
        shape_rule=lambda shapes, attrs: reduced_shape(shapes["input"], attrs["axes"], attrs["keepdims"]),
        resolve=_resolve_axes, family=_FAMILY, empty_fill=empty_fill,
        gradients=(GradRule("input", f"{name}_grad", ("grad_output",), _reduce_attrs),), doc=doc,
    )
    gradient = OpSpec(
        f"{name}_grad", (Input("grad_output"),), (_AXES, _KEEPDIMS, _INPUT_SIZE),
        shape_rule=_grad_shape, resolve=_resolve_axes, family=_FAMILY, grad_of=name, doc=grad_doc,
    )
    return forward, gradient


reduce_sum, reduce_sum_grad = _reduction(
    "reduce_sum", "Sum over axes, like torch.sum(input, dim, keepdim).",
    "Gradient of reduce_sum: grad_output broadcast back over the reduced axes.", empty_fill=0.0,
)
reduce_mean, reduce_mean_grad = _reduction(
    "reduce_mean", "Mean over axes, like torch.mean(input, dim, keepdim).",
    "Gradient of reduce_mean: grad_output broadcast back over the reduced axes, divided by their size.",
    empty_fill=float("nan"),  # like torch.mean over no element
)



def _max_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    expected = reduced_shape(shapes["input"], attrs["axes"], attrs["keepdims"])
    if shapes["grad_output"] != expected:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, the input {shapes['input']} reduced")
    return shapes["input"]


reduce_max = OpSpec(
    "reduce_max", (Input("input"),), (_AXES, _KEEPDIMS),
    shape_rule=lambda shapes, attrs: reduced_shape(shapes["input"], attrs["axes"], attrs["keepdims"]),
    resolve=_resolve_axes, family=_FAMILY,  # no empty_fill: a maximum over no element is refused, as torch.amax does
    gradients=(GradRule("input", "reduce_max_grad", ("grad_output", "input"), lambda call: dict(call.attrs)),),
    doc="Maximum over axes, like torch.amax(input, dim, keepdim): NaN if the reduced elements hold one.",
)
reduce_max_grad = OpSpec(
    "reduce_max_grad", (Input("grad_output"), Input("input")), (_AXES, _KEEPDIMS),
    shape_rule=_max_grad_shape, resolve=_resolve_axes, family=_FAMILY, grad_of="reduce_max",
    doc="Gradient of reduce_max, like torch.amax's: grad_output shared evenly among the elements equal to the "
    "maximum (ties split it), zero elsewhere; NaN over reduced elements whose maximum is NaN.",
)

# ---------------------------------------------------------------------------- broadcasting


def _broadcasts(source: Shape, target: Shape) -> bool:
    try:
        return broadcast_shape(source, target) == target
    except InvalidSpec:
        return False


def _broadcast_to_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    source, target = shapes["input"], attrs["shape"]
    if len(source) > len(target) or not _broadcasts(source, target):
        raise InvalidSpec("shape", target, f"a shape the input {source} broadcasts to (sizes equal or 1, aligned from the last)")
    return target


def _sum_to_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    source, target = shapes["input"], attrs["shape"]
    if len(target) > len(source) or not _broadcasts(target, source):
        raise InvalidSpec("shape", target, f"a shape that broadcasts to the input {source} (sizes equal or 1, aligned from the last)")
    return target


def _input_shape(call: OpCall) -> dict[str, Any]:
    return {"shape": call.shape("input")}


broadcast_to = OpSpec(
    "broadcast_to", (Input("input"),), (Attr("shape", convert=shape, doc="the shape to broadcast to"),),
    shape_rule=_broadcast_to_shape, family=_FAMILY,
    gradients=(GradRule("input", "sum_to_shape", attrs=_input_shape),),
    doc="The input repeated along new leading axes and axes of size 1, like numpy.broadcast_to (a copy).",
)
sum_to_shape = OpSpec(
    "sum_to_shape", (Input("input"),), (Attr("shape", convert=shape, doc="a shape that broadcasts to the input's"),),
    shape_rule=_sum_to_shape, family=_FAMILY, empty_fill=0.0,
    gradients=(GradRule("input", "broadcast_to", attrs=_input_shape),),
    doc="The adjoint of broadcast_to: the input summed over the axes that broadcasting 'shape' to it added or "
    "stretched, like torch.Tensor.sum_to_size. The gradient of each operand of a broadcasting op.",
)

SPECS = (reduce_sum, reduce_sum_grad, reduce_mean, reduce_mean_grad, reduce_max, reduce_max_grad, broadcast_to, sum_to_shape)
