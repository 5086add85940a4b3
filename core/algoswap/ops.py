"""Call any registered op on numpy arrays through the registry.

    >>> import numpy as np, algoswap
    >>> x = np.random.rand(1, 3, 8, 8).astype(np.float32)
    >>> w = np.random.rand(4, 3, 3, 3).astype(np.float32)
    >>> y = algoswap.ops.conv2d(x, w, None, stride=2, padding=1, algorithm="numpy:smm")
    >>> y.shape
    (1, 4, 4, 4)

Every op of the registry is available as ``algoswap.ops.<name>``; ``algoswap.ops.call(name, ...)``
does the same with the op named by a string. ``algorithm`` is ``"default"``, an algorithm name
or ``"backend:algorithm"``; ``transfer=True`` lets a device backend serve host arrays (moved to
its memory and back). Selection is cached, so repeated calls with the same shapes cost little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._core_caches import OPS_CALLS
from ._errors import OpArgumentError
from ._global import get_registry
from ._inputs import host_array, shown
from ._log import moved as moved_log
from ._records import MemorySpace
from ._runner import Runner
from ._select import attrs_key, select
from ._trace import record

__all__ = ["call"]


def is_sparse(array: Any) -> bool:
    """Whether ``array`` is a ``scipy.sparse`` matrix or array (checked without importing scipy)."""
    return type(array).__module__.startswith("scipy.sparse")


def _input_name(op: str, position: int) -> Callable[[], str]:
    def name() -> str:
        spec = get_registry().spec(op)
        names = spec.flat_input_names(max(position + 1, len(spec.inputs)))
        return names[position] if position < len(names) else f"inputs[{position}]"

    return name


def _as_input(op: str, position: int, array: Any) -> Any:
    if array is None or type(array) is np.ndarray or is_sparse(array):
        return array
    return host_array(array, op, _input_name(op, position))


def _check_formats(op: str, arrays: tuple[Any, ...]) -> tuple[int, ...]:
    """Refuse a sparse matrix for a dense input and anything but CSR for a CSR input; return the
    positions of the inputs the op updates in place."""
    spec = get_registry().spec(op)
    formats = {i.name: i.format for i in spec.inputs}
    names = spec.flat_input_names(max(len(arrays), len(spec.inputs)))
    for name, array in zip(names, arrays):
        if array is None:
            continue
        csr = is_sparse(array) and getattr(array, "format", None) == "csr"
        if formats[name] == "csr" and not csr:
            raise OpArgumentError(op, name, f"a {type(array).__name__}", "a scipy.sparse CSR matrix (csr_matrix or csr_array)")
        if formats[name] != "csr" and is_sparse(array):
            raise OpArgumentError(op, name, f"a sparse {type(array).__name__}", "a dense numpy array")
    return tuple(names.index(name) for name in spec.in_place)


def _check_updatable(op: str, names: tuple[str, ...], arrays: tuple[Any, ...], positions: tuple[int, ...]) -> None:
    for position in positions:
        array = arrays[position]
        if type(array) is not np.ndarray or not (array.flags.c_contiguous and array.flags.writeable):
            raise OpArgumentError(op, names[position], "an array that is not C-contiguous and writeable",
                                  "a C-contiguous, writeable numpy array (the op updates it in place)")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call of ``algoswap.ops`` ready to run: the runner of its selection, the memory space its host
    arrays move to (None: the backend reads host memory), and the positions of the inputs it updates."""

    runner: Runner
    moves: MemorySpace | None
    updated: tuple[int, ...]


def _prepare(op: str, given: tuple[Any, ...], arrays: tuple[Any, ...], algorithm: str, transfer: bool,
             attrs: dict[str, Any]) -> Prepared:
    updated = _check_formats(op, arrays)
    memory = None if transfer or algorithm == "auto" else "host"
    shapes = [None if a is None else a.shape for a in arrays]
    dtypes = [None if a is None else str(a.dtype) for a in arrays]
    try:
        selection = select(get_registry(), op, shapes, dtypes, attrs, algorithm, memory)
    except OpArgumentError as exc:
        raise _as_given(exc, op, given) from None
    space = selection.backend.memory
    return Prepared(Runner(selection), None if space.is_host else space, updated)


def _as_given(exc: OpArgumentError, op: str, given: tuple[Any, ...]) -> OpArgumentError:
    """The error, saying what the caller gave where it was not an array ("a float 1.5", not "a 0-D array")."""
    for position, value in enumerate(given):
        if value is not None and not hasattr(value, "shape") and _input_name(op, position)() == exc.argument:
            return type(exc)(exc.op, exc.argument, f"{shown(value)} (as an array: {np.ndim(value)}-D)", exc.expected)
    return exc


def call(op: str, *arrays: Any, algorithm: str = "default", transfer: bool = False, **attrs: Any) -> Any:
    """Run ``op`` on numpy arrays (``None`` for an absent optional input) through the registry.

    CSR inputs take ``scipy.sparse`` CSR matrices; inputs an op updates in place (optimizer
    state) must be C-contiguous, writeable numpy arrays, and are updated even through ``transfer``.
    """
    given = arrays
    arrays = tuple(a if a is None or type(a) is np.ndarray else _as_input(op, i, a) for i, a in enumerate(arrays))
    cache = get_registry().selection_cache.prepared(OPS_CALLS)
    inputs = tuple([None if a is None else (type(a), a.shape, a.dtype) for a in arrays])  # a list: faster than a generator
    try:
        key: Any = (op, algorithm, transfer, inputs, attrs_key(attrs))
        prepared: Prepared | None = cache.get(key)
    except TypeError:  # an unhashable attribute value (an array): validated on every call
        key, prepared = None, None
    if prepared is None:
        prepared = _prepare(op, given, arrays, algorithm, transfer, attrs)
        if key is not None:
            cache.put(key, prepared)
    runner, moves, updated = prepared.runner, prepared.moves, prepared.updated
    record(runner.selection)
    if updated:
        _check_updatable(op, runner.selection.call.input_names, arrays, updated)
    if moves is None:
        return runner.run(arrays)
    moved_log(op, "host", moves.name, sum(a is not None for a in arrays))
    moved = tuple(None if a is None else moves.upload(a) for a in arrays)
    result = runner.run(moved)
    for position in updated:
        np.copyto(arrays[position], moves.download(moved[position]))
    return arrays[updated[0]] if updated else moves.download(result)


def _op_function(op: str) -> Callable[..., Any]:
    def run(*arrays: Any, algorithm: str = "default", transfer: bool = False, **attrs: Any) -> Any:
        return call(op, *arrays, algorithm=algorithm, transfer=transfer, **attrs)

    spec = get_registry().spec(op)
    run.__name__ = run.__qualname__ = op
    run.__doc__ = spec.describe()
    return run


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    registry = get_registry()
    if name not in registry.ops:
        raise AttributeError(f"module 'algoswap.ops' has no op {name!r}; registered ops: {', '.join(sorted(registry.ops))}")
    function = globals()[name] = _op_function(name)  # later lookups skip __getattr__
    return function


def __dir__() -> list[str]:
    return sorted(set(get_registry().ops) | set(__all__))
