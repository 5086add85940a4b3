"""Losses: softmax_cross_entropy (from logits, with class indices or class probabilities) and
binary_cross_entropy (from probabilities), each with a reduction, and their gradients with respect
to the prediction (labels and targets are data: no gradient)."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import choice
from ._dtypes import typed

_REDUCTION = Attr("reduction", "mean", choice("mean", "sum", "none"), "how the per-element losses combine")


def _reduced(per_element: Shape, attrs: dict[str, Any]) -> Shape:
    return per_element if attrs["reduction"] == "none" else ()


def _loss_of_nothing(shapes: dict[str, Any], attrs: dict[str, Any]) -> float:
    """The loss over no sample, as torch gives it: a sum of nothing is 0, a mean of nothing NaN."""
    return 0.0 if attrs["reduction"] == "sum" else float("nan")


def _reduction_attrs(call: OpCall) -> dict[str, Any]:
    return {"reduction": call.attrs["reduction"]}


def _check_grad_output(shapes: dict[str, Any], expected: Shape) -> None:
    if shapes["grad_output"] != expected:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, the shape of the loss")


# -------------------------------------------------------------------- softmax_cross_entropy


def _sce_per_sample(shapes: dict[str, Any]) -> Shape:
    logits, labels = shapes["logits"], shapes["labels"]
    if labels not in (logits[:1], logits):
        raise InvalidSpec("labels", f"shape {labels}", f"{logits[:1]} (class indices) or {logits} (class probabilities) for logits {logits}")
    return logits[:1]


def _sce_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad_output(shapes, _reduced(_sce_per_sample(shapes), attrs))
    shape: Shape = shapes["logits"]
    return shape


_SCE_DTYPES = typed(soft=("labels",))

softmax_cross_entropy = OpSpec(
    "softmax_cross_entropy", (Input("logits", (2,)), Input("labels", (1, 2))), (_REDUCTION,),
    shape_rule=lambda shapes, attrs: _reduced(_sce_per_sample(shapes), attrs), dtype_rule=_SCE_DTYPES, family="loss",
    empty_fill=_loss_of_nothing,
    gradients=(GradRule("logits", "softmax_cross_entropy_grad", ("grad_output", "logits", "labels"), _reduction_attrs),),
    doc="-sum(labels * log_softmax(logits)) per sample, logits (N, C); labels are class indices (N,) of an "
    "integer dtype (like torch.nn.functional.cross_entropy) or class probabilities / one-hot rows (N, C) of "
    "the logits' dtype. reduction 'mean' averages over N.",
)
softmax_cross_entropy_grad = OpSpec(
    "softmax_cross_entropy_grad", (Input("grad_output", (0, 1)), Input("logits", (2,)), Input("labels", (1, 2))),
    (_REDUCTION,), shape_rule=_sce_grad_shape, dtype_rule=_SCE_DTYPES, family="loss", grad_of="softmax_cross_entropy",
    doc="Gradient of softmax_cross_entropy with respect to the logits: (softmax(logits) - labels) * grad_output (/ N for 'mean').",
)

# --------------------------------------------------------------------- binary_cross_entropy


def _bce_per_element(shapes: dict[str, Any]) -> Shape:
    if shapes["target"] != shapes["input"]:
        raise InvalidSpec("target", f"shape {shapes['target']}", f"shape {shapes['input']} like 'input'")
    shape: Shape = shapes["input"]
    return shape


def _bce_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad_output(shapes, _reduced(_bce_per_element(shapes), attrs))
    shape: Shape = shapes["input"]
    return shape


binary_cross_entropy = OpSpec(
    "binary_cross_entropy", (Input("input"), Input("target")), (_REDUCTION,),
    shape_rule=lambda shapes, attrs: _reduced(_bce_per_element(shapes), attrs), family="loss", empty_fill=_loss_of_nothing,
    gradients=(GradRule("input", "binary_cross_entropy_grad", ("grad_output", "input", "target"), _reduction_attrs),),
    doc="-(target * log(input) + (1 - target) * log(1 - input)) from probabilities in [0, 1] (apply sigmoid "
    "first), each log clamped at -100, like torch.nn.functional.binary_cross_entropy. reduction 'mean' "
    "averages over every element.",
)
binary_cross_entropy_grad = OpSpec(
    "binary_cross_entropy_grad", (Input("grad_output"), Input("input"), Input("target")), (_REDUCTION,),
    shape_rule=_bce_grad_shape, family="loss", grad_of="binary_cross_entropy",
    doc="Gradient of binary_cross_entropy with respect to its input: grad_output * (input - target) / "
    "max(input * (1 - input), 1e-12) (/ size for 'mean'), as torch computes it.",
)

SPECS = (softmax_cross_entropy, softmax_cross_entropy_grad, binary_cross_entropy, binary_cross_entropy_grad)
