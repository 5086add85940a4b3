"""Normalisation: inference batch norm (batchnorm2d, and batchnorm2d_fused with an activation after it), training batch norm with batch statistics
(batch_norm_train), layer norm, instance norm and group norm, with the gradients of the last four."""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._errors import InvalidSpec
from ._geometry import ANY_RANK, MAX_RANK
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import expected, expecting, integer
from .conv import ACTIVATION


@expecting("a finite real number >= 0")
def _eps(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(expected(_eps))
    return float(value)


@expecting("a finite real number > 0 (as in torch, training batch norm needs eps > 0)")
def _positive_eps(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(expected(_positive_eps))
    return float(value)


_EPS = Attr("eps", 1e-5, _eps, "added to the variance before its square root")
_TRAIN_EPS = Attr("eps", 1e-5, _positive_eps, "added to the variance before its square root (> 0)")
_NDIM = Attr("normalized_ndim", 1, integer(1), "how many trailing dimensions are normalised together")


def _check_grad(shapes: dict[str, Any]) -> Shape:
    x = shapes["input"]
    if shapes["grad_output"] != x:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {x} like 'input'")
    return x


def _per_channel(shapes: dict[str, Any], names: tuple[str, ...]) -> Shape:
    x = shapes["input"]
    for name in names:
        shape = shapes.get(name)
        if shape is not None and shape != (x[1],):
            raise InvalidSpec(name, f"shape {shape}", f"({x[1]},), one per channel of the input {x}")
    return x


# ------------------------------------------------------------------------------ batchnorm2d

_BATCHNORM2D_INPUTS = (
    Input("input", (4,)),
    Input("running_mean", (1,)),
    Input("running_var", (1,)),
    Input("weight", (1,), optional=True),
    Input("bias", (1,), optional=True),
)


def _batchnorm2d_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    return _per_channel(shapes, ("running_mean", "running_var", "weight", "bias"))


# Inference only: no gradient rules (training mode normalises with batch statistics: batch_norm_train).
batchnorm2d = OpSpec(
    "batchnorm2d",
    _BATCHNORM2D_INPUTS,
    (_EPS,),
    shape_rule=_batchnorm2d_shape,
    family="norm",
    doc="(input - running_mean) / sqrt(running_var + eps) * weight + bias per channel (dim 1), "
    "like torch.nn.BatchNorm2d in eval mode.",
)
batchnorm2d_fused = OpSpec(
    "batchnorm2d_fused",
    _BATCHNORM2D_INPUTS,
    (_EPS, ACTIVATION),
    shape_rule=_batchnorm2d_shape,
    family="norm",
    doc="activation(batchnorm2d(input, running_mean, running_var, weight, bias)): an inference batch norm with the "
        "activation after it fused; swap_backend runs one where a batchnorm2d feeds only an activation (relu, relu6, "
        "silu, hardswish, exact gelu) and the backend serving the batch norm fuses it (DenseNet's pre-activations).",
)

# ------------------------------------------------------------------------- batch_norm_train


_NCHW = (4,)
_CHANNELS_FIRST = tuple(range(2, MAX_RANK + 1))  # (N, C, *spatial), any number of spatial dimensions


def _groups(shapes: dict[str, Any], attrs: dict[str, Any]) -> None:
    """group_norm's channels must split into num_groups equal groups (no other op has the attribute)."""
    groups, channels = attrs.get("num_groups"), shapes["input"][1]
    if groups is not None and channels % groups:
        raise InvalidSpec("num_groups", groups, f"a divisor of the {channels} channels of the input {shapes['input']}")


def _channel_norm_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _groups(shapes, attrs)
    return _per_channel(shapes, ("weight", "bias"))


def _bn_grad_input_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad(shapes)
    _groups(shapes, attrs)
    return _per_channel(shapes, ("weight",))


def _bn_grad_weight_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _groups(shapes, attrs)
    return (_check_grad(shapes)[1],)


def _channel_norm(name: str, attrs: tuple[Attr, ...], statistics: str, doc: str,
                  ranks: tuple[int, ...] = _NCHW) -> tuple[OpSpec, OpSpec, OpSpec, OpSpec]:
    """A per-channel normalisation of (N, C, ...) input (batch_norm_train, instance_norm: NCHW; group_norm:
    any rank >= 2) and its three gradients; the input's and weight's gradients take the forward's ``attrs``."""
    def grad_attrs(call: OpCall) -> dict[str, Any]:
        return {attr.name: call.attrs[attr.name] for attr in attrs}

    forward = OpSpec(
        name,
        (Input("input", ranks), Input("weight", (1,), optional=True), Input("bias", (1,), optional=True)),
        attrs,
        shape_rule=_channel_norm_shape,
        family="norm",
        gradients=(
            GradRule("input", f"{name}_grad_input", ("grad_output", "input", "weight"), grad_attrs),
            GradRule("weight", f"{name}_grad_weight", ("grad_output", "input"), grad_attrs),
            GradRule("bias", f"{name}_grad_bias"),
        ),
        doc=doc,
    )
    grad_input = OpSpec(
        f"{name}_grad_input",
        (Input("grad_output", ranks), Input("input", ranks), Input("weight", (1,), optional=True)),
        attrs,
        shape_rule=_bn_grad_input_shape,
        family="norm",
        grad_of=name,
        doc=f"Gradient of {name} with respect to its input (through the {statistics}).",
    )
    grad_weight = OpSpec(
        f"{name}_grad_weight",
        (Input("grad_output", ranks), Input("input", ranks)),
        attrs,
        shape_rule=_bn_grad_weight_shape,
        family="norm",
        grad_of=name,
        empty_fill=0.0,  # a sum over an empty batch
        doc=f"Gradient of {name} with respect to its weight: grad_output * normalised input, summed over all "
            "dimensions but the channels (1).",
    )
    grad_bias = OpSpec(
        f"{name}_grad_bias",
        (Input("grad_output", ranks),),
        (),
        shape_rule=lambda shapes, attrs: (shapes["grad_output"][1],),
        family="norm",
        grad_of=name,
        empty_fill=0.0,
        doc=f"Gradient of {name} with respect to its bias: grad_output summed over all dimensions but the channels (1).",
    )
    return forward, grad_input, grad_weight, grad_bias


batch_norm_train, batch_norm_train_grad_input, batch_norm_train_grad_weight, batch_norm_train_grad_bias = _channel_norm(
    "batch_norm_train", (_TRAIN_EPS,), "batch statistics",
    "(input - mean) / sqrt(var + eps) * weight + bias per channel (dim 1), with the mean and biased "
    "variance of this batch over (N, H, W), like torch.nn.BatchNorm2d in training mode. Only the "
    "normalised output is returned: updating running statistics is the caller's business.",
)
instance_norm, instance_norm_grad_input, instance_norm_grad_weight, instance_norm_grad_bias = _channel_norm(
    "instance_norm", (_EPS,), "per-sample statistics",
    "(input - mean) / sqrt(var + eps) * weight + bias, with the mean and biased variance of each "
    "sample and channel over (H, W), and weight and bias per channel, like torch.nn.functional.instance_norm "
    "without running statistics.",
)
_GROUPS = Attr("num_groups", convert=integer(1), doc="how many groups the channels are split into (it divides C)")
group_norm, group_norm_grad_input, group_norm_grad_weight, group_norm_grad_bias = _channel_norm(
    "group_norm", (_GROUPS, _EPS), "per-sample, per-group statistics",
    "(input - mean) / sqrt(var + eps) * weight + bias on (N, C, *spatial) input of any rank >= 2, with the mean "
    "and biased variance of each sample and group of C / num_groups consecutive channels (over those channels and "
    "every spatial position), and weight and bias per channel, like torch.nn.functional.group_norm.",
    _CHANNELS_FIRST,
)

# ------------------------------------------------------------------------------- layer_norm


def _normalized_shape(shapes: dict[str, Any], attrs: dict[str, Any], first: str = "input") -> Shape:
    """The trailing shape normalised together; weight and bias (when given) must have it."""
    x, ndim = shapes[first], attrs["normalized_ndim"]
    if ndim > len(x):
        raise InvalidSpec("normalized_ndim", ndim, f"an int in [1, {len(x)}] for the {len(x)}-D '{first}'")
    normalized = x[len(x) - ndim :]
    for name in ("weight", "bias"):
        shape = shapes.get(name)
        if shape is not None and shape != normalized:
            raise InvalidSpec(name, f"shape {shape}", f"shape {normalized}, the last {ndim} dimension(s) of '{first}' {x}")
    return normalized


def _layer_norm_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _normalized_shape(shapes, attrs)
    return shapes["input"]


def _ln_grad_input_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad(shapes)
    _normalized_shape(shapes, attrs)
    return shapes["input"]


def _ln_grad_weight_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad(shapes)
    return _normalized_shape(shapes, attrs)


def _ln_attrs(call: OpCall) -> dict[str, Any]:
    return {"normalized_ndim": call.attrs["normalized_ndim"], "eps": call.attrs["eps"]}


layer_norm = OpSpec(
    "layer_norm",
    (Input("input", ANY_RANK), Input("weight", ANY_RANK, optional=True), Input("bias", ANY_RANK, optional=True)),
    (_NDIM, _EPS),
    shape_rule=_layer_norm_shape,
    family="norm",
    gradients=(
        GradRule("input", "layer_norm_grad_input", ("grad_output", "input", "weight"), _ln_attrs),
        GradRule("weight", "layer_norm_grad_weight", ("grad_output", "input"), _ln_attrs),
        GradRule("bias", "layer_norm_grad_bias", ("grad_output",), lambda c: {"normalized_ndim": c.attrs["normalized_ndim"]}),
    ),
    doc="(input - mean) / sqrt(var + eps) * weight + bias, with the mean and biased variance over the last "
    "normalized_ndim dimensions (weight and bias have their shape), like torch.nn.functional.layer_norm.",
)
layer_norm_grad_input = OpSpec(
    "layer_norm_grad_input",
    (Input("grad_output", ANY_RANK), Input("input", ANY_RANK), Input("weight", ANY_RANK, optional=True)),
    (_NDIM, _EPS),
    shape_rule=_ln_grad_input_shape,
    family="norm",
    grad_of="layer_norm",
    doc="Gradient of layer_norm with respect to its input (through the mean and variance).",
)
layer_norm_grad_weight = OpSpec(
    "layer_norm_grad_weight",
    (Input("grad_output", ANY_RANK), Input("input", ANY_RANK)),
    (_NDIM, _EPS),
    shape_rule=_ln_grad_weight_shape,
    family="norm",
    grad_of="layer_norm",
    empty_fill=0.0,
    doc="Gradient of layer_norm with respect to its weight: grad_output * normalised input, summed over the leading dimensions.",
)
layer_norm_grad_bias = OpSpec(
    "layer_norm_grad_bias",
    (Input("grad_output", ANY_RANK),),
    (_NDIM,),
    shape_rule=lambda shapes, attrs: _normalized_shape(shapes, attrs, "grad_output"),
    family="norm",
    grad_of="layer_norm",
    empty_fill=0.0,
    doc="Gradient of layer_norm with respect to its bias: grad_output summed over the leading dimensions.",
)

SPECS = (
    batchnorm2d, batchnorm2d_fused,
    batch_norm_train, batch_norm_train_grad_input, batch_norm_train_grad_weight, batch_norm_train_grad_bias,
    layer_norm, layer_norm_grad_input, layer_norm_grad_weight, layer_norm_grad_bias,
    instance_norm, instance_norm_grad_input, instance_norm_grad_weight, instance_norm_grad_bias,
    group_norm, group_norm_grad_input, group_norm_grad_weight, group_norm_grad_bias,
)
