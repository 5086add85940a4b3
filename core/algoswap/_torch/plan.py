"""The steps of an ``algoswap.Model``'s plan and how each one runs on numpy arrays.

A plan is a list of steps over numbered value slots. Slots hold the constant weight arrays (set
once, at conversion), the model's inputs, and every intermediate value; a step reads its inputs
from slots, writes its output to one, and clears the slots whose last reader it is.

- ``OpStep``: one registry op (conv2d, add, ...) with its request ("default", "numpy:smm", ...).
  The selection is cached per step and input shapes, so a repeated call costs a dict lookup.
- ``PythonStep``: bookkeeping on Python values (``x.size(0)``, ``x.shape[1] * 2``): it lets
  ``x.view(x.size(0), -1)`` follow the batch size of each call.
- ``TorchStep``: a node run by PyTorch because no registry op serves it (``fallback="torch"``).
"""

from __future__ import annotations

import importlib
import operator
from dataclasses import dataclass, field
from logging import DEBUG
from typing import Any, Callable, Collection, Sequence

import numpy as np
import torch

from .._cache import LRUCache
from .._core_caches import MODEL_STEPS
from .._errors import NoImplementationError
from .._global import get_registry
from .._log import LOG, moved
from .._records import MemorySpace
from .._runner import Runner, bfloat16, numpy_dtype
from .._select import Selection, select, typed_key
from .._trace import record


@dataclass(frozen=True)
class Slot:
    """A reference to a value slot, inside the arguments of Python and torch steps and in attrs."""

    index: int


def resolve(value: Any, values: list[Any]) -> Any:
    """``value`` with every ``Slot`` replaced by the slot's current value (through lists, tuples, dicts)."""
    if isinstance(value, Slot):
        return values[value.index]
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(v, values) for v in value)
    if isinstance(value, dict):
        return {k: resolve(v, values) for k, v in value.items()}
    return value


def slots_in(value: Any) -> set[int]:
    """Every slot index referenced by ``value``."""
    if isinstance(value, Slot):
        return {value.index}
    if isinstance(value, (list, tuple)):
        return set().union(*(slots_in(v) for v in value))
    if isinstance(value, dict):
        return set().union(*(slots_in(v) for v in value.values()))
    return set()


@dataclass
class OpStep:
    """One registry op: ``values[output] = op(*values[inputs], **attrs)`` with the requested implementation.

    ``inputs`` are slot indices (None for an absent optional input); ``attrs`` may hold ``Slot``s
    (``dynamic``), resolved on each call (a reshape target computed from ``x.size(0)``).
    """

    name: str
    op: str
    request: str
    attrs: dict[str, Any]
    inputs: tuple[int | None, ...]
    output: int
    module: str | None = None
    target: str = ""
    folded: tuple[str, ...] = ()
    dynamic: bool = False
    params: tuple[int, ...] = ()  # positions of inputs that are weights (kept in their own layout)
    free: tuple[int, ...] = ()
    last_shapes: tuple[Any, ...] | None = None
    _cache: LRUCache[Runner] = field(default_factory=lambda: LRUCache(MODEL_STEPS), repr=False, compare=False)

    kind = "op"

    def reads(self) -> set[int]:
        return {i for i in self.inputs if i is not None} | (slots_in(self.attrs) if self.dynamic else set())

    def run(self, values: list[Any]) -> None:
        arrays = [None if i is None else values[i] for i in self.inputs]
        attrs = resolve(self.attrs, values) if self.dynamic else self.attrs
        runner = self.entry(arrays, attrs)
        record(runner.selection)
        values[self.output] = invoke(runner, arrays, self.params)

    def entry(self, arrays: list[Any], attrs: dict[str, Any]) -> Runner:
        """The runner of the implementation for these arrays, selected once per shapes (and memory
        spaces they are in)."""
        key = array_key(arrays)
        if self.dynamic:
            key += (typed_key(attrs),)
        entry: Runner | None = self._cache.get(key)
        if entry is None:
            entry = self._cache.put(key, self._prepare(arrays, attrs))
        self.last_shapes = key
        return entry

    def selection(self, shapes: list[Any], dtypes: list[str | None], attrs: dict[str, Any], where: str = "host") -> Selection:
        """Validate the call and choose its implementation (cached by the registry); ``where`` is the
        memory space of its inputs, preferred unless nothing there serves the call."""
        memory = memory_for(self.request, where)
        try:
            return select(get_registry(), self.op, shapes, dtypes, attrs, self.request, memory)
        except NoImplementationError:
            if memory is None:
                raise
            return select(get_registry(), self.op, shapes, dtypes, attrs, self.request, None)

    def _prepare(self, arrays: list[Any], attrs: dict[str, Any]) -> Runner:
        shapes = [None if a is None else tuple(a.shape) for a in arrays]
        dtypes = [None if a is None else str(a.dtype) for a in arrays]
        return Runner(self.selection(shapes, dtypes, attrs, location(arrays)))

    def preselect(self, shapes: list[Any], dtypes: list[str | None], attrs: dict[str, Any]) -> Selection:
        """Select now for inputs of these shapes (conversion with a sample input) and cache it."""
        chosen = self.selection(shapes, dtypes, attrs)
        key = tuple(None if s is None else (tuple(s), numpy_dtype(str(d)), "host") for s, d in zip(shapes, dtypes))
        if self.dynamic:
            key += (typed_key(attrs),)
        self._cache.put(key, Runner(chosen))
        self.last_shapes = key
        return chosen

    @property
    def last_selection(self) -> Selection | None:
        """The selection of the latest call (or of the sample input), None before any."""
        entry = self._cache.get(self.last_shapes) if self.last_shapes is not None else None
        return None if entry is None else entry.selection

    def transfers(self) -> str:
        """Where the latest call's activations (weights aside) had to move from, e.g. "host → sycl"."""
        chosen = self.last_selection
        if chosen is None or self.last_shapes is None:
            return ""
        return moves(self.last_shapes[: len(self.inputs)], self.params, chosen.backend.memory.name)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_cache=None, last_shapes=None)  # selections hold registry records: redone after unpickling
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _cache=LRUCache(MODEL_STEPS))


@dataclass
class PythonStep:
    """``values[output] = function(*args)`` on Python values (sizes, shape arithmetic, tuple items)."""

    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    output: int
    free: tuple[int, ...] = ()

    kind = "python"

    def reads(self) -> set[int]:
        return slots_in(self.args)

    def run(self, values: list[Any]) -> None:
        values[self.output] = self.function(*resolve(self.args, values))


@dataclass
class TorchStep:
    """A node PyTorch runs (``fallback="torch"``): arrays go in as tensors, tensors come out as arrays.

    ``target`` is a module (called), a function (called), or a method name (called on the first argument).
    """

    name: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: int
    reason: str
    label: str
    free: tuple[int, ...] = ()
    last_shape: tuple[int, ...] | None = None

    kind = "torch"

    def reads(self) -> set[int]:
        return slots_in(self.args) | slots_in(self.kwargs)

    def run(self, values: list[Any]) -> None:
        arrays = resolve(self.args, values)
        first = next((a for a in arrays if isinstance(a, np.ndarray)), None)
        self.last_shape = None if first is None else tuple(first.shape)
        args = to_torch(arrays)
        kwargs = to_torch(resolve(self.kwargs, values))
        with torch.no_grad():
            if isinstance(self.target, str):
                result = getattr(args[0], self.target)(*args[1:], **kwargs)
            else:
                result = self.target(*args, **kwargs)
        values[self.output] = to_numpy(result)


@dataclass(frozen=True)
class Resident:
    """A value a Model keeps in a backend's memory space between steps (a CuPy array on the GPU, a
    SYCL USM array, ...): moved to host memory only where a step elsewhere reads it."""

    array: Any
    space: MemorySpace

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return len(self.array.shape)

    @property
    def dtype(self) -> Any:
        return np.dtype(self.array.dtype)

    def host(self) -> np.ndarray:
        array: np.ndarray = self.space.download(self.array)
        return array


def on_host(value: Any) -> Any:
    """``value`` as a host array (Residents are downloaded)."""
    return value.host() if isinstance(value, Resident) else value


def location(arrays: list[Any]) -> str:
    """The memory space the first array is in: the one whose implementations need no transfer."""
    first = next((a for a in arrays if a is not None), None)
    return first.space.name if isinstance(first, Resident) else "host"


def memory_for(request: str, where: str) -> str | None:
    """The memory space selection prefers: the inputs' for "default" and unqualified algorithm
    names; none for "auto" or a request naming a backend (the data moves there)."""
    return None if request == "auto" or ":" in request else where


def moves(keys: Sequence[Any], params: Collection[int], target: str) -> str:
    """ "inputs moved host → sycl": the memory spaces the activations among ``keys`` (array_key
    entries; weights at ``params`` aside) came from, where that is not ``target``."""
    sources = sorted({k[2] for i, k in enumerate(keys) if k is not None and i not in params and k[2] != target})
    return f"inputs moved {', '.join(sources)} → {target}" if sources else ""


def array_key(arrays: list[Any]) -> tuple[Any, ...]:
    """Shapes, dtypes and memory spaces of a step's inputs: what its selection depends on."""
    return tuple(None if a is None else (tuple(a.shape), a.dtype, a.space.name if isinstance(a, Resident) else "host")
                 for a in arrays)


def invoke(runner: Runner, arrays: list[Any], params: tuple[int, ...]) -> Any:
    """Run a selected implementation: host arrays laid out as it takes them; for another memory
    space, inputs moved there (unless already there) and the output kept there as a Resident."""
    selection = runner.selection
    space = selection.backend.memory
    if space.is_host:
        return runner.run(arrange([on_host(a) for a in arrays], selection.impl.layout, params))
    if LOG.isEnabledFor(DEBUG):
        _log_moves(selection.call.op, arrays, params, space)
    moved = [None if a is None else a.array if isinstance(a, Resident) and a.space == space else space.upload(on_host(a))
             for a in arrays]
    return Resident(runner.run(moved), space)


def _log_moves(op: str, arrays: list[Any], params: tuple[int, ...], space: MemorySpace) -> None:
    for i, a in enumerate(arrays):
        if a is not None and i not in params and not (isinstance(a, Resident) and a.space == space):
            moved(op, a.space.name if isinstance(a, Resident) else "host", space.name, 1)


def is_channels_last(array: np.ndarray) -> bool:
    """Whether ``array`` is 4-D, NHWC in memory (and not also C-contiguous)."""
    return array.ndim == 4 and not array.flags.c_contiguous and array.transpose(0, 2, 3, 1).flags.c_contiguous


def _contiguous(array: Any) -> Any:
    return array if array is None or array.flags.c_contiguous else np.ascontiguousarray(array)


def _channels_last(array: np.ndarray) -> np.ndarray:
    if is_channels_last(array):
        return array
    nhwc: np.ndarray = np.ascontiguousarray(array.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return nhwc


def arrange(arrays: list[Any], layout: str, params: tuple[int, ...]) -> list[Any]:
    """The arrays in the memory order an implementation of this ``layout`` takes (see ``ImplRecord``):
    4-D activations channels-last for "channels_last" (weights, at ``params``, stay C-contiguous),
    everything as it is for "any", C-contiguous otherwise."""
    if layout == "any":
        return arrays
    if layout == "channels_last":
        return [_channels_last(a) if a is not None and a.ndim == 4 and i not in params else _contiguous(a)
                for i, a in enumerate(arrays)]
    return [_contiguous(a) for a in arrays]


Step = OpStep | PythonStep | TorchStep


@dataclass(frozen=True)
class NamedFunction:
    """A torch function of a fallback step stored by its import path (some, like F.max_pool2d, do not pickle)."""

    path: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, name = self.path.rpartition(".")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a CPU tensor sharing its memory (bfloat16 through an int16 view)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def tensor_to_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array sharing its memory (bfloat16 through an int16 view)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bfloat16())
    array: np.ndarray = tensor.numpy()
    return array


def to_torch(value: Any) -> Any:
    """numpy arrays (through lists, tuples, dicts) as CPU tensors sharing their memory where possible."""
    if isinstance(value, Resident):
        return array_to_tensor(value.host())
    if isinstance(value, np.ndarray):
        return array_to_tensor(value if value.flags.writeable else value.copy())
    if isinstance(value, (list, tuple)):
        return type(value)(to_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    return value


def to_numpy(value: Any) -> Any:
    """Tensors (through lists, tuples, dicts) as numpy arrays; torch.Size as a tuple; the rest as is."""
    if isinstance(value, torch.Tensor):
        return tensor_to_array(value.detach().cpu())
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if isinstance(value, tuple):  # also torch's named tuples (torch.sort's values, indices)
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


# Python-value functions of PythonSteps (module-level, so that plans pickle).


def size_of(array: Any, dim: int | None = None) -> Any:
    """``Tensor.size(dim)`` of an array: its shape as a tuple, or one size."""
    return tuple(array.shape) if dim is None else int(array.shape[dim])


def shape_of(array: Any) -> tuple[int, ...]:
    """``Tensor.shape`` of an array."""
    return tuple(array.shape)


def ndim_of(array: Any) -> int:
    """``Tensor.dim()`` / ``Tensor.ndim`` of an array."""
    return int(array.ndim)


PYTHON_OPERATORS: dict[Any, Callable[..., Any]] = {
    f: f for f in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
                   operator.neg, operator.getitem, operator.iadd, operator.imul)
}
