"""Data movement by position: slice, split, pad, transpose, with the gradient ops they need
(slice_grad serves slice and split; the gradient of transpose is a transpose)."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import _is_int, bounded, choice, expected, expecting, integer, optional, real, shape
from .shape import any_dtype

_FAMILY = "shape"
_INPUT_SIZE = Attr("input_size", convert=shape, doc="the shape of the forward op's input")


def _ints(minimum: int, what: str) -> Any:
    @expecting(what)
    def convert(value: Any) -> tuple[int, ...]:
        if _is_int(value):
            value = (value,)
        if not isinstance(value, (tuple, list)) or not all(_is_int(v) and v >= minimum for v in value):
            raise ValueError(what)
        bounded(value, what)
        return tuple(int(v) for v in value)

    return convert


def _per_dim(name: str, given: tuple[Any, ...], full: Shape) -> None:
    if len(given) != len(full):
        raise InvalidSpec(name, given, f"{len(full)} entries, one per dimension of the input {full}")


# ------------------------------------------------------------------------------------ slice


def _steps(step: tuple[int, ...] | None, full: Shape) -> tuple[int, ...]:
    """The canonical step: one per dimension (None: 1 along each)."""
    if step is None:
        return (1,) * len(full)
    _per_dim("step", step, full)
    return step


def _span(begin: int, size: int, step: int) -> int:
    """How far into its dimension a block of ``size`` elements every ``step`` from ``begin`` reaches."""
    return begin + (size - 1) * step + 1 if size else begin


def _resolve_slice(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    full, begin, size = shapes["input"], attrs["begin"], attrs["size"]
    _per_dim("begin", begin, full)
    _per_dim("size", size, full)
    step = _steps(attrs["step"], full)
    canonical = tuple(max(-(-(n - b) // t), 0) if s == -1 else s for n, b, s, t in zip(full, begin, size, step))
    if any(_span(b, s, t) > n or s < 0 for n, b, s, t in zip(full, begin, canonical, step)):
        raise InvalidSpec("size", size, f"sizes >= 0 (or -1: to the end) with begin {begin} + (size - 1) * step {step} "
                          f"within the input {full}")
    return {"begin": begin, "size": canonical, "step": step}


def _resolve_slice_grad(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return {**attrs, "step": _steps(attrs["step"], attrs["input_size"])}


def _slice_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    full, begin, piece, step = attrs["input_size"], attrs["begin"], shapes["grad_output"], attrs["step"]
    _per_dim("begin", begin, full)
    if len(piece) != len(full) or any(_span(b, s, t) > n for n, b, s, t in zip(full, begin, piece, step)):
        raise InvalidSpec("grad_output", f"shape {piece}", f"a block that fits in input_size {full} from begin {begin} "
                          f"with step {step}")
    return full


def _slice_attrs(call: OpCall) -> dict[str, Any]:
    return {"begin": call.attrs["begin"], "step": call.attrs["step"], "input_size": call.shape("input")}


_STEP = Attr("step", None, optional(_ints(1, "a tuple of ints >= 1, one per dimension")),
             "the distance between the elements taken along each dimension (None: 1)")


slice_ = OpSpec(
    "slice", (Input("input"),),
    (
        Attr("begin", convert=_ints(0, "a tuple of ints >= 0, one per dimension"), doc="the first index along each dimension"),
        Attr("size", convert=_ints(-1, "a tuple of ints >= 0 or -1 (to the end), one per dimension"), doc="the size along each dimension (-1: to the end)"),
        _STEP,
    ),
    shape_rule=lambda shapes, attrs: attrs["size"], resolve=_resolve_slice, dtype_rule=any_dtype, family=_FAMILY,
    gradients=(GradRule("input", "slice_grad", attrs=_slice_attrs),),
    doc="The elements input[begin[d] + i * step[d]] for i < size[d] along every dimension d, like "
    "input[begin : begin + (size - 1) * step + 1 : step] (canonical: size without -1, step one per dimension).",
)
slice_grad = OpSpec(
    "slice_grad", (Input("grad_output"),),
    (Attr("begin", convert=_ints(0, "a tuple of ints >= 0, one per dimension"), doc="where the block starts"), _INPUT_SIZE, _STEP),
    shape_rule=_slice_grad_shape, resolve=_resolve_slice_grad, family=_FAMILY, grad_of="slice", empty_fill=0.0,
    doc="Gradient of slice (and split): zeros of input_size with grad_output placed at begin, every step.",
)

# ------------------------------------------------------------------------------------ split


@expecting("an int >= 1 (equal parts) or a tuple of part sizes >= 1")
def _sections(value: Any) -> int | tuple[int, ...]:
    what = expected(_sections)
    if _is_int(value) and value >= 1:
        bounded((value,), what)
        return int(value)
    if isinstance(value, (tuple, list)) and value and all(_is_int(v) and v >= 1 for v in value):
        bounded(value, what)
        return tuple(int(v) for v in value)
    raise ValueError(what)


def _resolve_split(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    full, axis, sections, index = shapes["input"], attrs["axis"], attrs["sections"], attrs["index"]
    rank = len(full)
    if not -rank <= axis < rank:
        raise InvalidSpec("axis", axis, f"a dimension in [{-rank}, {rank - 1}] for a {rank}-D input")
    axis %= rank
    if isinstance(sections, int):
        if full[axis] % sections:
            raise InvalidSpec("sections", sections, f"a divisor of the size {full[axis]} of axis {axis}")
        sections = (full[axis] // sections,) * sections
    elif sum(sections) != full[axis]:
        raise InvalidSpec("sections", sections, f"part sizes adding up to the size {full[axis]} of axis {axis}")
    if index >= len(sections):
        raise InvalidSpec("index", index, f"a part in [0, {len(sections) - 1}]")
    return {"axis": axis, "sections": sections, "index": index}


def _split_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    full, axis = shapes["input"], attrs["axis"]
    return full[:axis] + (attrs["sections"][attrs["index"]],) + full[axis + 1 :]


def _split_attrs(call: OpCall) -> dict[str, Any]:
    full, axis, sections, index = call.shape("input"), call.attrs["axis"], call.attrs["sections"], call.attrs["index"]
    begin = tuple(sum(sections[:index]) if d == axis else 0 for d in range(len(full or ())))
    return {"begin": begin, "input_size": full}


split = OpSpec(
    "split", (Input("input"),),
    (
        Attr("sections", convert=_sections, doc="equal parts (int) or part sizes (tuple)"),
        Attr("index", convert=integer(0), doc="which part to return"),
        Attr("axis", 0, integer(), "the dimension to split"),
    ),
    shape_rule=_split_shape, resolve=_resolve_split, dtype_rule=any_dtype, family=_FAMILY,
    gradients=(GradRule("input", "slice_grad", attrs=_split_attrs),),
    doc="Part 'index' of the input cut along axis into sections (like torch.split(...)[index]); one call "
    "per part keeps every op single-output. Canonical sections: a tuple of sizes.",
)

# -------------------------------------------------------------------------------------- pad


@expecting("a tuple of (before, after) pairs of ints >= 0")
def _pads(value: Any) -> tuple[tuple[int, int], ...]:
    what = expected(_pads)
    if not isinstance(value, (tuple, list)) or not value:
        raise ValueError(what)
    pairs = []
    for pair in value:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(_is_int(v) and v >= 0 for v in pair):
            raise ValueError(what)
        bounded(pair, what)
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


_MODE = Attr("mode", "constant", choice("constant", "reflect", "replicate"), "how the border is filled")


def _resolve_pad(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    full = attrs["input_size"] if "input_size" in attrs else shapes["input"]
    pads = attrs["pads"]
    if len(pads) > len(full):
        raise InvalidSpec("pads", pads, f"at most {len(full)} pairs (one per dimension, the last ones) for the {len(full)}-D input")
    pads = ((0, 0),) * (len(full) - len(pads)) + pads
    if attrs["mode"] == "reflect" and any(max(p) >= n and max(p) > 0 for p, n in zip(pads, full)):
        raise InvalidSpec("pads", attrs["pads"], f"reflect padding smaller than the input's sizes {full}")
    return {**attrs, "pads": pads}


def _padded(full: Shape, pads: tuple[tuple[int, int], ...]) -> Shape:
    return tuple(n + b + a for n, (b, a) in zip(full, pads))


def _pad_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    expected = _padded(attrs["input_size"], attrs["pads"])
    if shapes["grad_output"] != expected:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, input_size {attrs['input_size']} padded")
    return attrs["input_size"]


_PADS = Attr("pads", convert=_pads, doc="(before, after) per dimension; fewer pairs pad the last dimensions")

pad = OpSpec(
    "pad", (Input("input"),), (_PADS, _MODE, Attr("value", 0.0, real(finite=False), "the fill of mode 'constant' (any float: -inf before a max pool)")),
    shape_rule=lambda shapes, attrs: _padded(shapes["input"], attrs["pads"]), resolve=_resolve_pad, family=_FAMILY,
    empty_fill=lambda shapes, attrs: attrs["value"] if attrs["mode"] == "constant" else None,  # all border
    gradients=(GradRule("input", "pad_grad", attrs=lambda c: {"pads": c.attrs["pads"], "mode": c.attrs["mode"], "input_size": c.shape("input")}),),
    doc="Pad each dimension with a constant, its mirror image without the edge ('reflect') or its edge "
    "value ('replicate'), like numpy.pad's constant/reflect/edge modes. Canonical pads: one pair per dimension.",
)
pad_grad = OpSpec(
    "pad_grad", (Input("grad_output"),), (_PADS, _MODE, _INPUT_SIZE),
    shape_rule=_pad_grad_shape, resolve=_resolve_pad, family=_FAMILY, grad_of="pad",
    doc="Gradient of pad: the inner block of grad_output, plus (reflect, replicate) the border entries added "
    "to the input entries they copy.",
)

# -------------------------------------------------------------------------------- transpose


def _resolve_transpose(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    rank, perm = len(shapes["input"]), attrs["perm"]
    if perm is None:
        return {"perm": tuple(reversed(range(rank)))}
    if sorted(perm) != list(range(rank)):
        raise InvalidSpec("perm", perm, f"a permutation of 0..{rank - 1} for the {rank}-D input")
    return {"perm": perm}


def _inverse(call: OpCall) -> dict[str, Any]:
    perm = call.attrs["perm"]
    return {"perm": tuple(perm.index(d) for d in range(len(perm)))}


@expecting("None or a tuple of ints >= 0")
def _perm(value: Any) -> tuple[int, ...] | None:
    return None if value is None else _ints(0, expected(_perm))(value)


transpose = OpSpec(
    "transpose", (Input("input"),), (Attr("perm", None, _perm, "output axis d is input axis perm[d] (None: reversed)"),),
    shape_rule=lambda shapes, attrs: tuple(shapes["input"][d] for d in attrs["perm"]), resolve=_resolve_transpose,
    dtype_rule=any_dtype, family=_FAMILY, gradients=(GradRule("input", "transpose", attrs=_inverse),),
    doc="The input with its axes permuted, like numpy.transpose (a copy); the gradient is the inverse permutation.",
)

SPECS = (slice_, slice_grad, split, pad, pad_grad, transpose)
