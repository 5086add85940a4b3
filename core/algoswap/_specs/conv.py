"""conv2d and its gradients with respect to input, weight and bias."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpSpec, Shape
from ._convert import choice, conv_padding, integer, pair
from ._geometry import ConvGeometry, conv_geometry, shape_attr

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")

CONV_ATTRS = (
    Attr("stride", 1, pair(1), "int or (sh, sw)"),
    Attr("padding", 0, conv_padding, "int, (ph, pw), ((top, bottom), (left, right)), 'same' or 'valid'"),
    Attr("dilation", 1, pair(1), "int or (dh, dw)"),
    Attr("groups", 1, integer(1), "input and output channels are split into this many groups"),
    Attr("padding_mode", "zeros", choice(*PADDING_MODES), "how the border is padded"),
)


def _explicit_padding(padding: Any, kernel: Shape, attrs: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        if attrs["stride"] != (1, 1):
            raise InvalidSpec("padding", "same", f"stride 1 with padding='same' (stride is {attrs['stride']})")
        totals = [d * (k - 1) for d, k in zip(attrs["dilation"], kernel)]
        return ((totals[0] // 2, totals[0] - totals[0] // 2), (totals[1] // 2, totals[1] - totals[1] // 2))
    if isinstance(padding[0], tuple):
        return (padding[0], padding[1])
    return ((padding[0], padding[0]), (padding[1], padding[1]))


def _with_explicit_padding(attrs: dict[str, Any], weight: Shape) -> dict[str, Any]:
    """The attributes with the padding made explicit: ((top, bottom), (left, right))."""
    return {**attrs, "padding": _explicit_padding(attrs["padding"], weight[2:], attrs)}


def _check_padding_mode(size: Shape, pads: tuple[tuple[int, int], tuple[int, int]], mode: str) -> None:
    for extent, (before, after) in zip(size, pads):
        widest = max(before, after)
        if mode == "reflect" and widest >= extent:
            raise InvalidSpec("padding", pads, f"reflect padding smaller than the input size {size}")
        if mode == "circular" and widest > extent:
            raise InvalidSpec("padding", pads, f"circular padding at most the input size {size}")


def _checked_geometry(x: Shape, w: Shape, attrs: dict[str, Any]) -> ConvGeometry:
    """The geometry of the convolution of x by w with resolved attributes, once they are checked
    against each other: channels and groups, the padding against the input, the kernel's fit."""
    groups = attrs["groups"]
    if x[1] != w[1] * groups:
        raise InvalidSpec("weight", f"shape {w}", f"weight.shape[1] * groups == input channels ({x[1]}); groups={groups}")
    if w[0] % groups:
        raise InvalidSpec("groups", groups, f"a divisor of the output channels ({w[0]})")
    if attrs["padding_mode"] != "zeros":
        _check_padding_mode(x[2:], attrs["padding"], attrs["padding_mode"])
    geometry = conv_geometry(x, w, stride=attrs["stride"], padding=attrs["padding"], dilation=attrs["dilation"],
                             groups=groups, padding_mode=attrs["padding_mode"])
    for size, k, d in zip(geometry.output[2:], w[2:], attrs["dilation"]):
        if size < 1:
            raise InvalidSpec("input", f"shape {x}", f"spatial size (with padding) of at least the dilated kernel ({d * (k - 1) + 1})")
    return geometry


def _conv2d_geometry(shapes: dict[str, Any], attrs: dict[str, Any]) -> ConvGeometry:
    geometry = _checked_geometry(shapes["input"], shapes["weight"], attrs)
    bias = shapes["bias"]
    if bias is not None and bias != (shapes["weight"][0],):
        raise InvalidSpec("bias", f"shape {bias}", f"shape ({shapes['weight'][0]},), one per output channel")
    return geometry


def _check_grad_output(grad: Shape, expected: Shape) -> None:
    if grad != expected:
        raise InvalidSpec("grad_output", f"shape {grad}", f"shape {expected}, the forward output shape")


def _grad_input_geometry(shapes: dict[str, Any], attrs: dict[str, Any]) -> ConvGeometry:
    geometry = _checked_geometry(attrs["input_size"], shapes["weight"], attrs)
    _check_grad_output(shapes["grad_output"], geometry.output)
    return geometry


def _grad_weight_geometry(shapes: dict[str, Any], attrs: dict[str, Any]) -> ConvGeometry:
    geometry = _checked_geometry(shapes["input"], attrs["weight_size"], attrs)
    _check_grad_output(shapes["grad_output"], geometry.output)
    return geometry


def _resolve_conv2d(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return _with_explicit_padding(attrs, shapes["weight"])


conv2d = OpSpec(
    "conv2d",
    (Input("input", (4,)), Input("weight", (4,)), Input("bias", (1,), optional=True)),
    CONV_ATTRS,
    resolve=_resolve_conv2d,
    geometry=_conv2d_geometry,
    family="conv",
    gradients=(
        GradRule("input", "conv2d_grad_input", ("grad_output", "weight"), lambda c: {**c.attrs, "input_size": c.shape("input")}),
        GradRule("weight", "conv2d_grad_weight", ("grad_output", "input"), lambda c: {**c.attrs, "weight_size": c.shape("weight")}),
        GradRule("bias", "conv2d_grad_bias"),
    ),
    doc="2-D cross-correlation of an (N, C, H, W) input with (O, C/groups, KH, KW) weights, like torch.nn.Conv2d.",
)

conv2d_grad_input = OpSpec(
    "conv2d_grad_input",
    (Input("grad_output", (4,)), Input("weight", (4,))),
    (Attr("input_size", doc="(N, C, H, W) of the forward input", convert=shape_attr(4)),) + CONV_ATTRS,
    shape_rule=lambda shapes, attrs: attrs["input_size"],
    resolve=_resolve_conv2d,
    geometry=_grad_input_geometry,
    family="conv",
    grad_of="conv2d",
    empty_fill=0.0,  # no output channel: nothing flows back
    doc="Gradient of conv2d with respect to its input.",
)

conv2d_grad_weight = OpSpec(
    "conv2d_grad_weight",
    (Input("grad_output", (4,)), Input("input", (4,))),
    (Attr("weight_size", doc="(O, C/groups, KH, KW) of the weight", convert=shape_attr(4)),) + CONV_ATTRS,
    shape_rule=lambda shapes, attrs: attrs["weight_size"],
    resolve=lambda shapes, attrs: _with_explicit_padding(attrs, attrs["weight_size"]),
    geometry=_grad_weight_geometry,
    family="conv",
    grad_of="conv2d",
    empty_fill=0.0,  # a sum over an empty batch
    doc="Gradient of conv2d with respect to its weight.",
)

conv2d_grad_bias = OpSpec(
    "conv2d_grad_bias",
    (Input("grad_output", (4,)),),
    (),
    shape_rule=lambda shapes, attrs: (shapes["grad_output"][1],),
    family="conv",
    grad_of="conv2d",
    empty_fill=0.0,
    doc="Gradient of conv2d with respect to its bias: grad_output summed over N, H and W.",
)

# conv2d_fused's activations -> the op and attributes each stands for (a chain's last member: relu6 is a
# hardtanh node from 0 to 6, gelu the exact one)
FUSED_ACTIVATIONS: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType({
    "relu": ("relu", MappingProxyType({})),
    "relu6": ("hardtanh", MappingProxyType({"min_val": 0.0, "max_val": 6.0})),
    "silu": ("silu", MappingProxyType({})),
    "hardswish": ("hardswish", MappingProxyType({})),
    "gelu": ("gelu", MappingProxyType({"approximate": "none"})),
})
ACTIVATIONS = ("none", *FUSED_ACTIVATIONS)
# the attribute of the fused twins (conv2d_fused, batchnorm2d_fused)
ACTIVATION = Attr("activation", "none", choice(*ACTIVATIONS), "applied last: 'none', 'relu', 'relu6', 'silu', 'hardswish' or 'gelu' (exact)")


def _fused_geometry(shapes: dict[str, Any], attrs: dict[str, Any]) -> ConvGeometry:
    geometry = _conv2d_geometry(shapes, attrs)
    residual = shapes["residual"]
    if residual is not None and residual != geometry.output:
        raise InvalidSpec("residual", f"shape {residual}", f"the output shape {geometry.output}")
    return geometry


conv2d_fused = OpSpec(
    "conv2d_fused",
    (Input("input", (4,)), Input("weight", (4,)), Input("bias", (1,), optional=True),
     Input("residual", (4,), optional=True, doc="added to the convolution's output (a residual connection)")),
    CONV_ATTRS + (ACTIVATION,),
    resolve=_resolve_conv2d,
    geometry=_fused_geometry,
    family="conv",
    doc="activation(conv2d(input, weight, bias) + residual): a convolution with the add and activation after it "
        "fused; swap_backend runs one where a conv2d feeds only an add and/or an activation (relu, relu6, silu, "
        "hardswish, exact gelu) and the backend serving the convolution fuses them.",
)

SPECS = (conv2d, conv2d_grad_input, conv2d_grad_weight, conv2d_grad_bias, conv2d_fused)
