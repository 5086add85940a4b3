"""Shape manipulation: flatten."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .._errors import InvalidSpec, OpDtypeError
from .._spec import Attr, GradRule, Input, OpSpec, Shape
from ._convert import integer


def any_dtype(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
    """The dtype rule of data-movement ops: any dtype, kept as it is."""
    dtype = dtypes[0]
    if dtype is None:
        raise OpDtypeError(op, names[0], None, "an array")
    return dtype


def _resolve_flatten(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    rank = len(shapes["input"])
    dims = {}
    for name in ("start_dim", "end_dim"):
        dim = attrs[name]
        if not -rank <= dim < rank:
            raise InvalidSpec(name, dim, f"a dimension in [{-rank}, {rank - 1}] for a {rank}-D input")
        dims[name] = dim % rank
    if dims["start_dim"] > dims["end_dim"]:
        raise InvalidSpec("end_dim", attrs["end_dim"], f"a dimension not before start_dim ({attrs['start_dim']})")
    return dims


def _flatten_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    x, start, end = shapes["input"], attrs["start_dim"], attrs["end_dim"]
    return x[:start] + (math.prod(x[start : end + 1]),) + x[end + 1 :]


flatten = OpSpec(
    "flatten",
    (Input("input", tuple(range(1, 9))),),
    (Attr("start_dim", 1, integer(), "first dimension to merge"), Attr("end_dim", -1, integer(), "last dimension to merge")),
    shape_rule=_flatten_shape,
    resolve=_resolve_flatten,
    dtype_rule=any_dtype,
    family="shape",
    gradients=(GradRule("input", None),),
    doc="Merge dimensions start_dim..end_dim into one, like torch.nn.Flatten (start_dim defaults to 1).",
)

SPECS = (flatten,)
