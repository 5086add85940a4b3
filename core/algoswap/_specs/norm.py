"""Normalisation: inference batch norm over the channel dimension of NCHW inputs."""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, Input, OpSpec, Shape


def _eps(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError("a finite real number >= 0")
    return float(value)


def _batchnorm_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    x = shapes["input"]
    for name in ("running_mean", "running_var", "weight", "bias"):
        shape = shapes[name]
        if shape is not None and shape != (x[1],):
            raise InvalidSpec(name, f"shape {shape}", f"({x[1]},), one per channel of the input {x}")
    return x


# Inference only: no gradient rules (training batch norm normalises with batch statistics,
# which is another op).
batchnorm2d = OpSpec(
    "batchnorm2d",
    (
        Input("input", (4,)),
        Input("running_mean", (1,)),
        Input("running_var", (1,)),
        Input("weight", (1,), optional=True),
        Input("bias", (1,), optional=True),
    ),
    (Attr("eps", 1e-5, _eps, "added to the variance before its square root"),),
    shape_rule=_batchnorm_shape,
    family="norm",
    doc="(input - running_mean) / sqrt(running_var + eps) * weight + bias per channel (dim 1), "
    "like torch.nn.BatchNorm2d in eval mode.",
)

SPECS = (batchnorm2d,)
