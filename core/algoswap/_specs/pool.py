"""maxpool2d, avgpool2d, adaptiveavgpool2d and their gradients."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpSpec, Shape
from ._convert import boolean, integer, optional, output_size, pair
from ._geometry import pool_output_size, shape_attr

_WINDOW = (
    Attr("kernel_size", doc="int or (kh, kw)", convert=pair(1)),
    Attr("stride", None, optional(pair(1)), "int or (sh, sw); None means kernel_size"),
    Attr("padding", 0, pair(0), "int or (ph, pw), at most half the kernel"),
)
MAXPOOL_ATTRS = _WINDOW + (
    Attr("dilation", 1, pair(1), "int or (dh, dw)"),
    Attr("ceil_mode", False, boolean, "round the output size up"),
)
AVGPOOL_ATTRS = _WINDOW + (
    Attr("ceil_mode", False, boolean, "round the output size up"),
    Attr("count_include_pad", True, boolean, "count zero padding in the divisor"),
    Attr("divisor_override", None, optional(integer(1)), "divide by this instead of the window size"),
)
_INPUT_SIZE = Attr("input_size", doc="(N, C, H, W) of the forward input", convert=shape_attr(4))


def _resolve_window(attrs: dict[str, Any]) -> dict[str, Any]:
    stride = attrs["stride"] if attrs["stride"] is not None else attrs["kernel_size"]
    for pad, kernel in zip(attrs["padding"], attrs["kernel_size"]):
        if pad > kernel // 2:
            raise InvalidSpec("padding", attrs["padding"], f"at most half the kernel size {attrs['kernel_size']}")
    return {**attrs, "stride": stride}


def window_output(x: Shape, attrs: dict[str, Any]) -> Shape:
    """The output shape of a (max or average) pooling window sliding over x."""
    dilation = attrs.get("dilation", (1, 1))
    out = [
        pool_output_size(x[2 + i], attrs["kernel_size"][i], attrs["stride"][i], attrs["padding"][i], dilation[i], attrs["ceil_mode"])
        for i in range(2)
    ]
    if min(out) < 1:
        raise InvalidSpec("input", f"shape {x}", f"spatial size of at least the (dilated) kernel {attrs['kernel_size']}")
    return (x[0], x[1], out[0], out[1])


def _check_grad(grad: Shape, expected: Shape) -> None:
    if grad != expected:
        raise InvalidSpec("grad_output", f"shape {grad}", f"shape {expected}, the forward output shape")


def _maxpool_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad(shapes["grad_output"], window_output(shapes["input"], attrs))
    return shapes["input"]


def _avgpool_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _check_grad(shapes["grad_output"], window_output(attrs["input_size"], attrs))
    return attrs["input_size"]


def _resolve_adaptive(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    x = shapes["input"]
    size = tuple(x[2 + i] if s is None else s for i, s in enumerate(attrs["output_size"]))
    return {"output_size": size}


maxpool2d = OpSpec(
    "maxpool2d",
    (Input("input", (4,)),),
    MAXPOOL_ATTRS,
    shape_rule=lambda shapes, attrs: window_output(shapes["input"], attrs),
    resolve=lambda shapes, attrs: _resolve_window(attrs),
    family="pool",
    gradients=(GradRule("input", "maxpool2d_grad", ("grad_output", "input"), lambda c: dict(c.attrs)),),
    doc="Maximum over each (dilated) window, like torch.nn.MaxPool2d; padding never wins.",
)
maxpool2d_grad = OpSpec(
    "maxpool2d_grad",
    (Input("grad_output", (4,)), Input("input", (4,))),
    MAXPOOL_ATTRS,
    shape_rule=_maxpool_grad_shape,
    resolve=lambda shapes, attrs: _resolve_window(attrs),
    family="pool",
    grad_of="maxpool2d",
    doc="Gradient of maxpool2d: each window's gradient goes to its first maximum.",
)
avgpool2d = OpSpec(
    "avgpool2d",
    (Input("input", (4,)),),
    AVGPOOL_ATTRS,
    shape_rule=lambda shapes, attrs: window_output(shapes["input"], attrs),
    resolve=lambda shapes, attrs: _resolve_window(attrs),
    family="pool",
    gradients=(GradRule("input", "avgpool2d_grad", ("grad_output",), lambda c: {**c.attrs, "input_size": c.shape("input")}),),
    doc="Mean over each window, like torch.nn.AvgPool2d.",
)
avgpool2d_grad = OpSpec(
    "avgpool2d_grad",
    (Input("grad_output", (4,)),),
    (_INPUT_SIZE,) + AVGPOOL_ATTRS,
    shape_rule=_avgpool_grad_shape,
    resolve=lambda shapes, attrs: _resolve_window(attrs),
    family="pool",
    grad_of="avgpool2d",
    doc="Gradient of avgpool2d.",
)
adaptiveavgpool2d = OpSpec(
    "adaptiveavgpool2d",
    (Input("input", (4,)),),
    (Attr("output_size", doc="int or (oh, ow); None entries keep the input size", convert=output_size),),
    shape_rule=lambda shapes, attrs: shapes["input"][:2] + attrs["output_size"],
    resolve=_resolve_adaptive,
    family="pool",
    gradients=(GradRule("input", "adaptiveavgpool2d_grad", ("grad_output",), lambda c: {"input_size": c.shape("input")}),),
    doc="Mean over windows [floor(i*in/out), ceil((i+1)*in/out)), like torch.nn.AdaptiveAvgPool2d.",
)


def _adaptive_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    grad, size = shapes["grad_output"], attrs["input_size"]
    if grad[:2] != size[:2]:
        raise InvalidSpec("grad_output", f"shape {grad}", f"batch and channels {size[:2]} of input_size")
    return size


adaptiveavgpool2d_grad = OpSpec(
    "adaptiveavgpool2d_grad",
    (Input("grad_output", (4,)),),
    (_INPUT_SIZE,),
    shape_rule=_adaptive_grad_shape,
    family="pool",
    grad_of="adaptiveavgpool2d",
    doc="Gradient of adaptiveavgpool2d (the output size is grad_output's).",
)

SPECS = (maxpool2d, maxpool2d_grad, avgpool2d, avgpool2d_grad, adaptiveavgpool2d, adaptiveavgpool2d_grad)
