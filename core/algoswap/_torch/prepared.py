"""A swapped call prepared to run: the runner of its selection and its backend's memory space, cached per
call signature in the bounded ``torch_calls`` cache (``plan``), and, per call site (a swapped layer's
forward, one gradient op of a call), the last call bound to its inputs (``CallSite``): a call like the
last one skips the cache's key and look-up and the parameters' view look-ups, after a check of all that
can change between calls (the registry, the request and attributes, each input's shape, dtype and
memory, each parameter's data pointer, strides and device).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, cast

import torch

from .._core_caches import TORCH_CALLS
from .._global import get_registry
from .._records import MemorySpace
from .._ref import resolve_ref
from .._runner import Runner
from .._select import select
from .tensors import DTYPE_NAMES, resizable_array
from .transfer import Parameter, aliasing_view, crosses_as_is, first, host_view, memory_of, to_backend, where

Inputs = Sequence[Optional[torch.Tensor]]


def encode_attrs(attrs: dict[str, Any]) -> str:
    """Attributes as the custom op's string argument (canonical JSON: tuples become lists)."""
    return json.dumps(attrs, sort_keys=True)


def decode_attrs(text: str) -> dict[str, Any]:
    """The attributes back from their JSON (lists as the tuples they were)."""
    return {name: _tuples(value) for name, value in json.loads(text).items()}


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@dataclass(slots=True)
class Prepared:
    """A swapped layer's call ready to run: the runner of its selection, the backend's memory space
    (``host``: whether it is host memory), its DLPack import (None where it has none), whether the
    implementation takes arrays in any memory order (``any_order``: dense device tensors then cross as they
    are laid out), and, once a backward pass asked, how each input's gradient is computed (``bridge.GradStep``)."""

    runner: Runner
    space: MemorySpace
    host: bool
    enter: Any
    any_order: bool = False
    gradients: list[Any] | None = None


def plan(op: str, request: str, attrs: str, inputs: Inputs) -> Prepared:
    """The call prepared from its selection, cached per op, request, attrs, memory, shapes, dtypes:
    nothing is resolved again on later calls."""
    memory = None if request == "auto" else memory_of(cast(torch.Tensor, inputs[first(inputs)]))
    key: tuple[Any, ...] = (op, request, attrs, memory)  # attrs is canonical JSON (1, 1.0 and true differ): cheap to hash
    for t in inputs:
        key += (None,) if t is None else (t.shape, t.dtype)
    cache = get_registry().selection_cache.prepared(TORCH_CALLS)
    prepared: Prepared | None = cache.get(key)
    if prepared is None:
        names = [None if t is None else DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
        shapes = [None if t is None else tuple(t.shape) for t in inputs]
        selection = select(get_registry(), op, shapes, names, decode_attrs(attrs), request, memory)
        space = selection.backend.memory
        enter = None if space.from_dlpack is None else resolve_ref(space.from_dlpack)
        runner = Runner(selection)
        prepared = cache.put(key, Prepared(runner, space, space.is_host, enter, runner.layout is None))
    return prepared


class _Kept:
    """A parameter's kept view, good while the tensor at its position is where the view was made (``where``:
    the view holds that memory, so a tensor found there with the same layout reads what the view reads)."""

    __slots__ = ("where", "view")

    def __init__(self, tensor: torch.Tensor, view: Any) -> None:
        self.where, self.view = where(tensor), view


# What a bound call knew of each input: None (absent), _Kept (a parameter and its view), or the
# (shape, dtype, memory) of a tensor converted at each call.
Check = Optional[Any]


class Bound:
    """A call bound to its inputs: its prepared call, and what each input was (``Check``)."""

    __slots__ = ("epoch", "request", "attrs", "prepared", "checks", "first")

    def __init__(self, epoch: object, request: str, attrs: str, prepared: Prepared, checks: list[Check], first: int) -> None:
        self.epoch, self.request, self.attrs, self.prepared, self.checks, self.first = epoch, request, attrs, prepared, checks, first

    def arrays(self, inputs: Inputs) -> list[Any] | None:
        """The inputs in the backend's memory, or None where they differ from the bound ones."""
        checks = self.checks
        if len(inputs) != len(checks):
            return None
        prepared = self.prepared
        host = prepared.host
        arrays: list[Any] = []
        for tensor, check in zip(inputs, checks):
            if check is None:
                if tensor is not None:
                    return None
                arrays.append(None)
            elif check.__class__ is _Kept:
                if tensor is None or where(tensor) != check.where:
                    return None
                arrays.append(check.view)
            elif (tensor is None or tensor.shape != check[0] or tensor.dtype is not check[1]
                  or ("host" if tensor.is_cpu else tensor.device.type) != check[2]):  # memory_of, written out
                return None
            else:
                arrays.append(host_view(tensor) if host else to_backend(tensor, prepared.space, prepared.enter, prepared.any_order))
        return arrays


def _epoch() -> object:
    return get_registry().selection_cache.epoch


def bind(op: str, request: str, attrs: str, inputs: Inputs) -> tuple[Bound, list[Any]]:
    """The call prepared (``plan``) and bound to ``inputs``, with the inputs in the backend's memory."""
    epoch = _epoch()  # before the plan: a registry changed meanwhile makes this bound call stale at once
    prepared = plan(op, request, attrs, inputs)
    checks: list[Check] = []
    arrays: list[Any] = []
    for tensor in inputs:
        if tensor is None:
            checks.append(None)
            arrays.append(None)
            continue
        make = _kept_view_maker(tensor, prepared)
        if make is not None:
            kept = _Kept(tensor, aliasing_view(tensor, make))
            checks.append(kept)
            arrays.append(kept.view)
        else:
            checks.append((tensor.shape, tensor.dtype, memory_of(tensor)))
            arrays.append(host_view(tensor) if prepared.host else to_backend(tensor, prepared.space, prepared.enter, prepared.any_order))
    return Bound(epoch, request, attrs, prepared, checks, first(inputs)), arrays


def _kept_view_maker(tensor: torch.Tensor, prepared: Prepared) -> Callable[[torch.Tensor], Any] | None:
    """How the view of a parameter that aliases its memory is made (as ``host_view`` and ``to_backend``
    make it), or None where the tensor is no parameter or is copied at each call."""
    if type(tensor) is not Parameter or not crosses_as_is(tensor, prepared.any_order):
        return None
    if prepared.host:
        return resizable_array if tensor.is_cpu else None
    enter: Callable[[torch.Tensor], Any] | None = prepared.enter
    return enter if enter is not None and memory_of(tensor) == prepared.space.name else None


class CallSite:
    """Where swapped calls are made from (a swapped layer, one gradient op of a prepared call): its last
    call bound to its inputs, used again while the next call's registry, request, attributes and inputs
    check out against it, else bound anew (one attribute replaced whole: safe across threads). Bounded:
    one call per site; none kept while the ``torch_calls`` cache is off (size 0). Copies (``copy.deepcopy``)
    and unpickled modules start empty (a bound call holds views of the original's memory)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: Bound | None = None

    def __reduce__(self) -> tuple[type[CallSite], tuple[()]]:
        return CallSite, ()

    def bound(self, op: str, request: str, attrs: str, inputs: Inputs) -> tuple[Bound, list[Any]]:
        """The call bound to ``inputs`` (the last one where it still holds), with the inputs in the backend's memory."""
        last = self.last
        if last is not None and last.request == request and last.attrs == attrs and last.epoch is _epoch():
            arrays = last.arrays(inputs)
            if arrays is not None:
                return last, arrays
        last, arrays = bind(op, request, attrs, inputs)
        if TORCH_CALLS.size:
            self.last = last
        return last, arrays
