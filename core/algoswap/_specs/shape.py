"""Shape manipulation: flatten, reshape, concat."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .._errors import InvalidSpec, OpDtypeError
from ._geometry import ANY_RANK
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import _is_int, bounded, expected, expecting, integer


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
    (Input("input", ANY_RANK),),
    (Attr("start_dim", 1, integer(), "first dimension to merge"), Attr("end_dim", -1, integer(), "last dimension to merge")),
    shape_rule=_flatten_shape,
    resolve=_resolve_flatten,
    dtype_rule=any_dtype,
    family="shape",
    gradients=(GradRule("input", None),),
    doc="Merge dimensions start_dim..end_dim into one, like torch.nn.Flatten (start_dim defaults to 1).",
)



def same_any_dtype(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
    """The dtype rule of ops joining several arrays: any dtype, the same for every input."""
    first = any_dtype(op, names, dtypes)
    for index, (name, dtype) in enumerate(zip(names, dtypes)):
        if dtype is not None and dtype != first:
            label = f"{name}[{index}]" if names.count(name) > 1 else name
            raise OpDtypeError(op, label, dtype, f"{first}, the dtype of the first input")
    return first


@expecting("an int or a tuple of ints, each >= 0 or -1 (at most one -1)")
def _target_shape(value: Any) -> tuple[int, ...]:
    what = expected(_target_shape)
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) and (v >= 0 or v == -1) for v in value):
        raise ValueError(what)
    if sum(v == -1 for v in value) > 1:
        raise ValueError(what)
    bounded(value, what)
    return tuple(int(v) for v in value)


def _resolve_reshape(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    x, target = shapes["input"], attrs["shape"]
    count, known = math.prod(x), math.prod(v for v in target if v != -1)
    if -1 in target:
        if not known:
            raise InvalidSpec("shape", target, f"no -1 next to a size 0: the input {x} has 0 elements, so -1 could be any size")
        if count % known:
            raise InvalidSpec("shape", target, f"a shape whose known sizes (product {known}) divide the {count} elements of the input {x}")
        target = tuple(count // known if v == -1 else v for v in target)
    elif known != count:
        raise InvalidSpec("shape", target, f"a shape of {count} elements like the input {x} (it has {known})")
    return {"shape": target}


reshape = OpSpec(
    "reshape",
    (Input("input"),),
    (Attr("shape", doc="the new shape; one size may be -1 (inferred)", convert=_target_shape),),
    shape_rule=lambda shapes, attrs: attrs["shape"],
    resolve=_resolve_reshape,
    dtype_rule=any_dtype,
    family="shape",
    gradients=(GradRule("input", None),),
    doc="The input's elements in row-major order under a new shape, like torch.reshape (canonical: no -1).",
)


def _resolve_concat(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    first = shapes["inputs"][0]
    rank, axis = len(first), attrs["axis"]
    if not -rank <= axis < rank:
        raise InvalidSpec("axis", axis, f"a dimension in [{-rank}, {rank - 1}] for {rank}-D inputs")
    axis %= rank
    for index, shape in enumerate(shapes["inputs"][1:], start=1):
        if len(shape) != rank or any(s != f for d, (s, f) in enumerate(zip(shape, first)) if d != axis):
            raise InvalidSpec(f"inputs[{index}]", f"shape {shape}", f"the shape {first} of inputs[0] except on axis {axis}")
    return {"axis": axis}


def _concat_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    first, axis = shapes["inputs"][0], attrs["axis"]
    joined = sum(shape[axis] for shape in shapes["inputs"])
    return first[:axis] + (joined,) + first[axis + 1 :]


def _concat_part(call: OpCall, item: int) -> dict[str, Any]:
    """The split of grad_output that is the gradient of the item-th input."""
    axis = call.attrs["axis"]
    return {"sections": tuple(shape[axis] for shape in call.shapes if shape is not None), "index": item, "axis": axis}


concat = OpSpec(
    "concat",
    (Input("inputs", ANY_RANK, variadic=True),),
    (Attr("axis", 0, integer(), "the dimension to join along (negative counts from the end)"),),
    shape_rule=_concat_shape,
    resolve=_resolve_concat,
    dtype_rule=same_any_dtype,
    family="shape",
    gradients=(GradRule("inputs", "split", item_attrs=_concat_part),),
    doc="Join one or more arrays along an existing axis, like torch.cat (shapes agree elsewhere).",
)

SPECS = (flatten, reshape, concat)
