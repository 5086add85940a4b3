"""Running a selected implementation: what every execution path (``ops.call``, the torch bridge, a
swap_backend Model's steps, the graph executor) does around the call itself, written once.

A ``Runner`` is made once per selection (each path caches it with the selection) and called with
the inputs already in the backend's memory space. It

- gives the implementation its inputs in the memory order it declared (``ImplRecord.layout``):
  C-contiguous, as they are ("any"), or 4-D activations in NHWC memory ("channels_last"; an input
  named "weight" stays as it is), so no implementation re-detects the layout from strides (host
  arrays, and CuPy's: ``_layout``);
- runs nothing for a call with no element to compute (``OpCall.empty``: a batch of 0): the output
  is an empty array (or one of ``OpCall.fill``) of the spec's shape and dtype in the backend's
  memory space, and an in-place op returns its first input unchanged;
- turns a ``MemoryError`` of the implementation (C++'s ``std::bad_alloc`` arrives as one) into an
  ``ImplementationMemoryError`` naming the op, the implementation and the shapes;
- checks the result against the spec (shape, dtype) and the memory space (its array type), or, for
  an in-place op, that it is the first input: anything else is an ``ImplementationError`` naming
  the implementation and its distribution, before it reaches the caller.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

import numpy as np

from ._errors import ImplementationError, ImplementationMemoryError
from ._global import get_registry
from ._layout import arrange
from ._records import MemorySpace
from ._select import Selection
from ._sizes import human_bytes, nbytes

_TYPES: dict[str, type | None] = {}  # MemorySpace.array_type -> the type it names (None: not importable)


class Runner:
    """A selected implementation with its canonical attributes and what its result must be."""

    __slots__ = ("selection", "fn", "attrs", "shape", "dtype", "array_type", "updated", "empty", "layout", "weights")

    def __init__(self, selection: Selection) -> None:
        call = selection.call
        in_place = get_registry().spec(call.op).in_place
        self.selection = selection
        self.fn: Callable[..., Any] = selection.impl.callable
        self.attrs = dict(call.attrs)
        self.shape = call.out_shape
        self.dtype = numpy_dtype(call.out_dtype)
        self.array_type = array_type(selection.backend.memory)
        self.updated = call.input_names.index(in_place[0]) if in_place else None
        self.empty = call.empty
        self.layout = selection.impl.layout if selection.impl.layout != "any" else None
        self.weights = tuple(i for i, name in enumerate(call.input_names) if name == "weight")

    def run(self, arrays: Sequence[Any], attrs: dict[str, Any] | None = None, contiguous: bool = False) -> Any:
        """The checked result of the implementation on ``arrays`` (in its memory space), with its
        canonical attributes or ``attrs`` (a graph node's, updated at each run). ``contiguous``: the
        caller vouches that every array is C-contiguous (then only a "channels_last" layout arranges them)."""
        if self.empty:
            return self._nothing_to_compute(arrays)
        layout = self.layout
        if layout is not None and (not contiguous or layout == "channels_last"):
            arrays = arrange(arrays, layout, self.weights)
        try:
            result = self.fn(*arrays, **(self.attrs if attrs is None else attrs))
        except MemoryError as exc:
            raise self._out_of_memory(exc) from exc
        if self.updated is not None:
            if result is not arrays[self.updated]:
                name = self.selection.call.input_names[self.updated]
                raise self._broken(result, f"the '{name}' array it was given, updated in place")
            return result
        if type(result) is not self.array_type:
            result = self._of_array_type(result)
        if result.shape != self.shape or (result.dtype is not self.dtype and result.dtype != self.dtype):
            raise self._broken(result, self._expected())
        return result

    def _expected(self) -> str:
        return f"a {self.dtype.name} {self.selection.backend.memory.array_type} of shape {self.shape}"

    def _of_array_type(self, result: Any) -> Any:
        """``result`` if it is of the memory space's array type (a subclass, or named where the type
        cannot be imported); a numpy scalar as the 0-D array it stands for; else an ImplementationError."""
        space = self.selection.backend.memory
        if self.array_type is not None and isinstance(result, self.array_type):
            return result
        if space.is_host and isinstance(result, np.generic):  # numpy's ufuncs give these for 0-D arrays
            return np.asarray(result)
        kind = type(result)
        if self.array_type is None and space.array_type in (kind.__qualname__, f"{kind.__module__}.{kind.__qualname__}"):
            self.array_type = kind
            return result
        raise self._broken(result, self._expected())

    def _nothing_to_compute(self, arrays: Sequence[Any]) -> Any:
        if self.updated is not None:
            return arrays[self.updated]
        call, space = self.selection.call, self.selection.backend.memory
        host = np.empty(self.shape, self.dtype) if call.fill is None else np.full(self.shape, call.fill, self.dtype)
        return host if space.is_host else space.upload(host)

    def _where(self) -> str:
        selection = self.selection
        owner = get_registry().owner_of(selection.backend.name) or f"plugin {selection.backend.plugin!r}"
        return f"{selection.call.op}: implementation {selection.impl.qualified} ({owner})"

    def _broken(self, result: Any, expected: str) -> ImplementationError:
        call = self.selection.call
        return ImplementationError(
            f"{self._where()} returned {describe(result)}; expected {expected}, for inputs {_shapes(call.shapes)} "
            f"{call.dtype} (a bug in that implementation: report it to its authors, or choose another with algorithm=)",
            self.selection.impl.qualified,
        )

    def _out_of_memory(self, exc: MemoryError) -> ImplementationMemoryError:
        call = self.selection.call
        return ImplementationMemoryError(
            f"{self._where()} ran out of memory for inputs {_shapes(call.shapes)} {call.dtype} (output {call.out_shape}, "
            f"{human_bytes(nbytes(call.out_shape, call.out_dtype))}): {type(exc).__name__}: {exc}",
            self.selection.impl.qualified,
        )


def describe(value: Any) -> str:
    """What a value is, for error messages: "None", "a list", "a float32 numpy.ndarray of shape (2, 3)"."""
    if value is None:
        return "None"
    kind = type(value)
    name = "numpy.ndarray" if kind is np.ndarray else f"{kind.__module__}.{kind.__qualname__}"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:
        return f"a {dtype} {name} of shape {shape}"
    article = "an" if kind.__name__[:1] in "aeiou" else "a"
    return f"{article} {kind.__name__}"


def _shapes(shapes: Sequence[Any]) -> str:
    return ", ".join(str(s) for s in shapes)


def array_type(space: MemorySpace) -> type | None:
    """The type ``space.array_type`` names ("module.Type"), imported once; None where it cannot be."""
    name = space.array_type
    if name not in _TYPES:
        _TYPES[name] = _import_type(name)
    return _TYPES[name]


def holds(space: MemorySpace, value: Any) -> bool:
    """Whether ``value`` is an array of ``space`` (of its array type, or named as it where the type
    cannot be imported)."""
    kind = array_type(space)
    if kind is not None:
        return isinstance(value, kind)
    named = type(value)
    return space.array_type in (named.__qualname__, f"{named.__module__}.{named.__qualname__}")


def _import_type(name: str) -> type | None:
    module, _, attribute = name.rpartition(".")
    while module:
        try:
            value: Any = importlib.import_module(module)
            for part in attribute.split("."):
                value = getattr(value, part)
            return value if isinstance(value, type) else None
        except (ImportError, AttributeError):
            module, _, head = module.rpartition(".")
            attribute = f"{head}.{attribute}"
    return None


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype of a dtype name (bfloat16 from ml_dtypes)."""
    return bfloat16() if name == "bfloat16" else np.dtype(name)


def bfloat16() -> np.dtype[Any]:
    """numpy's bfloat16 dtype (from ml_dtypes, which algoswap-dnnl installs)."""
    try:
        import ml_dtypes
    except ImportError as exc:
        raise ImportError("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)") from exc
    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dtype
