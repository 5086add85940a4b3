"""Op specs: declarations of an op's inputs, attributes, shape rule and dtype rule.

A spec says what an op means and which calls are valid; it never computes the op.
`OpSpec.bind` validates a call before any backend runs and returns an `OpCall`:
the canonical attributes, input shapes, dtype and output shape that implementations
and their `supports` predicates receive.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from ._errors import InvalidSpec, OpArgumentError, OpDtypeError
from ._sizes import check_output_fits

Shape = tuple[int, ...]
# The dtype sets backends declare their implementations for (exported as algoswap.FLOAT_DTYPES, ...).
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")  # every numpy integer dtype
# Every dtype an array may have on both sides of the torch front ends (torch's uint16..uint64 have few operators):
# what data-movement ops (reshape, concat, slicing, ...) take. bfloat16 numpy arrays come from ml_dtypes.
ALL_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", *FLOAT_DTYPES)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Input:
    """One array input: its name, allowed ranks (None: any) and whether it may be None.

    The last input may be ``variadic``: it then takes one or more arrays, and the shape rule
    sees a tuple of their shapes under its name. ``format`` is "dense" (an array) or "csr"
    (a ``scipy.sparse`` CSR matrix: rules see its shape and dtype like an array's).
    """

    name: str
    ranks: tuple[int, ...] | None = None
    optional: bool = False
    doc: str = ""
    variadic: bool = False
    format: str = "dense"


@dataclass(frozen=True)
class Attr:
    """One attribute: its default and a converter that validates and canonicalises it.

    The converter raises `ValueError(expected)` for a bad value; the core turns that
    into an `OpArgumentError` naming the op and the attribute.
    """

    name: str
    default: Any = REQUIRED
    convert: Callable[[Any], Any] = lambda value: value
    doc: str = ""


@dataclass(frozen=True)
class OpCall:
    """A validated call: what implementations and `supports` predicates are given.

    ``dtype`` is the call's (what implementations declare they take); ``out_dtype`` the output's,
    the same but where the spec's ``out_dtype`` rule says otherwise (one_hot's ``dtype`` attribute).

    ``empty``: there is nothing to compute, because the output or an input has no elements (a batch
    of 0). No implementation runs such a call: the output is made empty, or filled with ``fill``
    where an empty input gives a non-empty output (a sum over nothing is 0), and an in-place op
    leaves its inputs as they are.

    ``geometry``: what the spec's geometry rule made of the call while binding it, for implementations
    to read rather than compute again (the conv2d family's ``algoswap.ConvGeometry``); None for ops
    without one.
    """

    op: str
    shapes: tuple[Shape | None, ...]
    dtype: str
    attrs: Mapping[str, Any]
    out_shape: Shape
    input_names: tuple[str, ...] = ()
    empty: bool = False
    fill: float | None = None
    out_dtype: str = ""
    geometry: Any = None

    def __post_init__(self) -> None:
        if not self.out_dtype:
            object.__setattr__(self, "out_dtype", self.dtype)

    def shape(self, name: str) -> Shape | None:
        """The shape of the input called `name` (None for an absent optional input)."""
        return self.shapes[self.input_names.index(name)]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) with its attributes as a dict: a mappingproxy does not pickle."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return (_op_call, ({**values, "attrs": dict(self.attrs)},))


def _op_call(values: dict[str, Any]) -> OpCall:
    return OpCall(**{**values, "attrs": MappingProxyType(values["attrs"])})


@dataclass(frozen=True)
class GradRule:
    """How to get the gradient of one input of an op: which gradient op to call, on which
    arrays (``"grad_output"``, ``"output"`` (the forward result) or the forward inputs' names),
    with which attributes.

    ``op=None`` means the gradient is grad_output reshaped to the input's shape (data-movement ops).
    For a variadic input, ``item_attrs(call, item)`` gives the attributes for its ``item``-th array
    (concat: the part of grad_output that array became).
    """

    wrt: str
    op: str | None
    inputs: tuple[str, ...] = ("grad_output",)
    attrs: Callable[[OpCall], dict[str, Any]] = lambda call: {}
    item_attrs: Callable[[OpCall, int], dict[str, Any]] | None = None

    def attrs_for(self, call: OpCall, item: int = 0) -> dict[str, Any]:
        """The gradient op's attributes (for the ``item``-th array of a variadic input)."""
        return self.item_attrs(call, item) if self.item_attrs is not None else self.attrs(call)


ShapeRule = Callable[[dict[str, Any], dict[str, Any]], Shape]
EmptyFill = Callable[[dict[str, Any], dict[str, Any]], "float | None"]
Resolver = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
GeometryRule = Callable[[dict[str, Any], dict[str, Any]], Any]


def ranks_text(ranks: Sequence[int], separator: str) -> str:
    """"2-D or 4-D"; a run of three or more ranks as "1-D to 64-D"."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [f"{run[0]}-D to {run[-1]}-D" if len(run) > 2 else separator.join(f"{r}-D" for r in run) for run in runs]
    return separator.join(parts)


def _no_resolve(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return attrs


def same_float_dtype(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
    """The default dtype rule: every present input shares one floating dtype, kept by the output."""
    present = [(n, d) for n, d in zip(names, dtypes) if d is not None]
    first_name, first = present[0]
    if first not in FLOAT_DTYPES:
        raise OpDtypeError(op, first_name, first, f"a floating dtype ({', '.join(FLOAT_DTYPES)})")
    for name, dtype in present[1:]:
        if dtype != first:
            raise OpDtypeError(op, name, dtype, f"{first}, the dtype of '{first_name}'")
    return first


@dataclass(frozen=True)
class OpSpec:
    """The declaration of an op. See `algoswap.ops_specs()` for every registered one.

    ``in_place`` names the inputs the op updates in place (optimizer updates); such an op returns
    its first input, updated.

    ``empty_fill``: the value of every output element when an input has no elements but the output
    has some (0.0 for a sum over nothing, NaN for a mean), or a function of the input shapes and
    canonical attributes giving it (None where the op does not define one); None: such calls are
    refused. Either way no implementation runs on empty arrays.

    ``out_dtype``: the output's dtype from the call's dtype and canonical attributes, where the two
    differ (None: the output keeps the call's dtype).

    ``geometry``: a rule computing, from the input shapes and the resolved attributes, what the shape
    rule and the implementations would otherwise each compute again (the conv2d family's
    ``ConvGeometry``); it checks the call as it goes, runs once per bind (after ``resolve``) and is
    kept as ``OpCall.geometry``. Without a ``shape_rule`` the output shape is the geometry's ``output``.
    """

    name: str
    inputs: tuple[Input, ...]
    attrs: tuple[Attr, ...]
    shape_rule: ShapeRule | None = None
    resolve: Resolver = _no_resolve
    dtype_rule: Callable[[str, Sequence[str], Sequence[str | None]], str] = same_float_dtype
    family: str = "misc"
    doc: str = ""
    grad_of: str | None = None
    gradients: tuple[GradRule, ...] = ()
    in_place: tuple[str, ...] = ()
    empty_fill: float | EmptyFill | None = None
    out_dtype: Callable[[str, dict[str, Any]], str] | None = None
    geometry: GeometryRule | None = None
    _attr_index: Mapping[str, Attr] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.shape_rule is None and self.geometry is None:
            raise TypeError(f"OpSpec {self.name!r}: a shape_rule is required (or a geometry rule whose result has the output shape)")
        object.__setattr__(self, "_attr_index", {a.name: a for a in self.attrs})

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    def canonical_attrs(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Validate attribute names and values; return every attribute in canonical form."""
        for name in given:
            if name not in self._attr_index:
                known = ", ".join(self._attr_index) or "none"
                raise OpArgumentError(self.name, name, given[name], f"no such attribute (known: {known})")
        out: dict[str, Any] = {}
        for attr in self.attrs:
            value = given.get(attr.name, attr.default)
            if value is REQUIRED:
                raise OpArgumentError(self.name, attr.name, "nothing", "a value (it has no default)")
            try:
                out[attr.name] = attr.convert(value)
            except (ValueError, TypeError) as exc:
                raise OpArgumentError(self.name, attr.name, value, str(exc)) from None
        return out

    def flat_input_names(self, count: int) -> tuple[str, ...]:
        """Input names for ``count`` arrays (a variadic input's name repeats)."""
        names = self.input_names
        if self.inputs and self.inputs[-1].variadic:
            return names[:-1] + (names[-1],) * (count - len(names) + 1)
        return names

    def check_inputs(self, shapes: Sequence[Shape | None]) -> dict[str, Any]:
        """Validate the number, presence, ranks and sizes of the inputs."""
        if self.inputs and self.inputs[-1].variadic:
            return self._check_variadic(shapes)
        if len(shapes) > len(self.inputs) or len(shapes) < sum(not i.optional for i in self.inputs):
            expected = f"{len(self.inputs)} inputs ({', '.join(self.input_names)})"
            raise OpArgumentError(self.name, "inputs", f"{len(shapes)} inputs", expected)
        named: dict[str, Any] = {}
        for spec, shape in zip(self.inputs, list(shapes) + [None] * (len(self.inputs) - len(shapes))):
            named[spec.name] = self._check_one_input(spec, shape)
        return named

    def _check_variadic(self, shapes: Sequence[Shape | None]) -> dict[str, Any]:
        fixed, last = self.inputs[:-1], self.inputs[-1]
        if len(shapes) <= len(fixed):
            expected = f"{len(fixed)} inputs then one or more '{last.name}'"
            raise OpArgumentError(self.name, "inputs", f"{len(shapes)} inputs", expected)
        named: dict[str, Any] = {spec.name: self._check_one_input(spec, shape) for spec, shape in zip(fixed, shapes)}
        named[last.name] = tuple(self._check_one_input(last, shape) for shape in shapes[len(fixed):])
        return named

    def _check_one_input(self, spec: Input, shape: Shape | None) -> Shape | None:
        if shape is None:
            if not spec.optional:
                raise OpArgumentError(self.name, spec.name, None, "an array (this input is required)")
            return None
        if not all(hasattr(s, "__index__") for s in shape):  # ints, numpy ints, torch's symbolic sizes
            raise OpArgumentError(self.name, spec.name, f"shape {tuple(shape)}", "a shape of ints")
        shape = tuple(int(s) for s in shape)
        if spec.ranks is not None and len(shape) not in spec.ranks:
            raise OpArgumentError(self.name, spec.name, f"a {len(shape)}-D array of shape {shape}", f"a {ranks_text(spec.ranks, ' or ')} array")
        if any(s < 0 for s in shape):
            raise OpArgumentError(self.name, spec.name, f"shape {shape}", "sizes >= 0 (no negative sizes)")
        return shape

    def bind(self, shapes: Sequence[Shape | None], dtypes: Sequence[str | None], attrs: Mapping[str, Any]) -> OpCall:
        """Validate a call (shapes, dtypes, attributes) and return its canonical `OpCall`."""
        named = self.check_inputs(shapes)
        canonical = self.canonical_attrs(attrs)
        names = self.flat_input_names(max(len(shapes), len(self.inputs)))
        padded = list(dtypes) + [None] * (len(names) - len(dtypes))
        self._check_byte_order(names, padded)
        dtype = self.dtype_rule(self.name, names, padded)
        try:
            resolved, geometry, out_shape = self.apply_rules(named, canonical)
        except InvalidSpec as exc:
            raise OpArgumentError(self.name, exc.argument, exc.given, exc.expected) from None
        flat = tuple(s for spec in self.inputs for s in (named[spec.name] if spec.variadic else (named[spec.name],)))
        out_dtype = dtype if self.out_dtype is None else self.out_dtype(dtype, resolved)
        check_output_fits(self, named, dict(attrs), out_shape, out_dtype)
        empty_input = next(((n, s) for n, s in zip(names, flat) if s is not None and 0 in s), None)
        fill = None
        if empty_input is not None and 0 not in out_shape and not self.in_place:
            fill = self._fill(empty_input, named, resolved, out_shape)
        empty = empty_input is not None or 0 in out_shape
        return OpCall(self.name, flat, dtype, MappingProxyType(resolved), out_shape, names[: len(flat)], empty, fill, out_dtype,
                      geometry)

    def apply_rules(self, named: dict[str, Any], canonical: dict[str, Any]) -> tuple[dict[str, Any], Any, Shape]:
        """(the resolved attributes, the geometry or None, the output shape) of checked inputs and canonical
        attributes; InvalidSpec where the rules refuse them."""
        resolved = self.resolve(named, canonical)
        geometry: Any = None if self.geometry is None else self.geometry(named, resolved)
        shape = geometry.output if self.shape_rule is None else self.shape_rule(named, resolved)
        return resolved, geometry, tuple(int(s) for s in shape)

    def _check_byte_order(self, names: Sequence[str], dtypes: Sequence[str | None]) -> None:
        """Refuse arrays not in the machine's byte order (numpy names their dtypes '>f4', '<i8')."""
        for name, dtype in zip(names, dtypes):
            if dtype is not None and dtype[:1] in ("<", ">") and dtype[1:2] in ("b", "i", "u", "f", "c"):
                order = "big" if dtype[0] == ">" else "little"
                raise OpDtypeError(self.name, name, f"a {order}-endian array (dtype '{dtype}')", "an array in this "
                                   "machine's byte order (convert it: array.astype(array.dtype.newbyteorder('=')))")

    def _fill(self, empty: tuple[str, Shape], named: dict[str, Any], attrs: dict[str, Any], out_shape: Shape) -> float:
        """The value of a non-empty output computed from an empty input, or an error where the op has none."""
        fill = self.empty_fill(named, attrs) if callable(self.empty_fill) else self.empty_fill
        if fill is None:
            name, shape = empty
            raise OpArgumentError(self.name, name, f"shape {shape} (no elements)", f"an input with elements: {self.name} "
                                  f"defines no value for its output {out_shape} when '{name}' is empty")
        return float(fill)

    def describe(self) -> str:
        """A few lines for people: inputs, attributes with their defaults and the values they take, and the doc."""
        from ._specs._convert import expected  # here: the spec modules import this one

        lines = [f"{self.name}({', '.join(self._input_text(i) for i in self.inputs)})"]
        width = max((len(a.name) for a in self.attrs), default=0)
        for attr in self.attrs:
            default = "required" if attr.default is REQUIRED else repr(attr.default)
            allowed = expected(attr.convert)
            lines.append(f"    {attr.name.ljust(width)} = {default:<9} {attr.doc}".rstrip())
            if allowed:
                lines.append(f"    {''.ljust(width)}   takes {allowed}")
        if self.doc:
            lines.append(f"  {self.doc}")
        return "\n".join(lines)

    @staticmethod
    def _input_text(spec: Input) -> str:
        ranks = "" if spec.ranks is None else ranks_text(spec.ranks, "/")
        storage = "" if spec.format == "dense" else f" {spec.format}"
        return f"{spec.name}{'?' if spec.optional else ''}{' ' + ranks if ranks else ''}{storage}"
