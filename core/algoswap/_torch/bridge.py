"""Running registry implementations on torch tensors: the ``algoswap::call`` custom op.

One custom op serves every registered op: ``algoswap::call(op, request, attrs, inputs)``. Its fake
implementation is the op spec's shape and dtype rule, so ``torch.compile`` and ``torch.export``
trace swapped layers without graph breaks; its autograd formula calls the op's gradient ops
(declared by the spec) on the forward backend where it has them, as ``run`` runs any call.
Eager calls skip the dispatcher (over 100 us a call in torch.library's argument handling): those
that need no autograd run the implementation directly, those that record it go through
``EagerCall``, a plain autograd Function with the custom op's forward and backward.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from .._core_caches import TORCH_CALLS
from .._errors import NoImplementationError
from .._global import get_registry
from .._wishes import WISHES
from .._ref import resolve_ref
from .._records import MemorySpace
from .._runner import Runner
from .._select import Selection, select
from .._spec import FLOAT_DTYPES, GradRule, OpCall
from ..graph._place import first_serving
from .switches import torch_wishes
from .tensors import array_to_tensor, device_tensor, resizable_array, tensor_to_array

_TORCH_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "bool": torch.bool,
}
_DTYPE_NAMES = {v: k for k, v in _TORCH_DTYPES.items()}
# The dtypes a swap_backend Model computes in (its weights and floating activations): every float dtype.
COMPUTE_DTYPES = {name: _TORCH_DTYPES[name] for name in FLOAT_DTYPES}
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def encode_attrs(attrs: dict[str, Any]) -> str:
    """Attributes as the custom op's string argument (canonical JSON: tuples become lists)."""
    return json.dumps(attrs, sort_keys=True)


def decode_attrs(text: str) -> dict[str, Any]:
    """The attributes back from their JSON (lists as the tuples they were)."""
    return {name: _tuples(value) for name, value in json.loads(text).items()}


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def memory_of(tensor: torch.Tensor) -> str:
    """The memory-space name of a tensor's device: "host" for the CPU, else the device type."""
    return "host" if tensor.is_cpu else tensor.device.type


def _first(inputs: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    for tensor in inputs:
        if tensor is not None:
            return tensor
    raise ValueError("a swapped call without any input tensor")


def selection_for(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> Selection:
    """The (cached) selection serving these tensors: ``auto`` may pick a backend in other memory."""
    return _plan(op, request, attrs, inputs).runner.selection


@dataclass(slots=True)
class Prepared:
    """A swapped layer's call ready to run: the runner of its selection, the backend's memory space
    (``host``: whether it is host memory), its DLPack import (None where it has none), and, once a
    backward pass asked, how each input's gradient is computed (with the gradient op's encoded attributes)."""

    runner: Runner
    space: MemorySpace
    host: bool
    enter: Any
    gradients: list[tuple[GradChoice, str]] | None = None


def _plan(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> Prepared:
    """The call prepared from its selection, cached per op, request, attrs, memory, shapes, dtypes:
    nothing is resolved again on later calls."""
    memory = None if request == "auto" else memory_of(_first(inputs))
    key: tuple[Any, ...] = (op, request, attrs, memory)  # attrs is canonical JSON (1, 1.0 and true differ): cheap to hash
    for t in inputs:
        key += (None,) if t is None else (t.shape, t.dtype)
    cache = get_registry().selection_cache.prepared(TORCH_CALLS)
    prepared: Prepared | None = cache.get(key)
    if prepared is None:
        names = [None if t is None else _DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
        shapes = [None if t is None else tuple(t.shape) for t in inputs]
        selection = select(get_registry(), op, shapes, names, decode_attrs(attrs), request, memory)
        space = selection.backend.memory
        enter = None if space.from_dlpack is None else resolve_ref(space.from_dlpack)
        prepared = cache.put(key, Prepared(Runner(selection), space, space.is_host, enter))
    return prepared


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of the tensor (a copy only when it is not a contiguous CPU tensor)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_cpu:
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor_to_array(tensor)


def _from_host(array: np.ndarray, arrays: list[Any], like: torch.Tensor) -> torch.Tensor:
    """A new tensor on ``like``'s device holding ``array`` (copied if it aliases an input)."""
    aliases = array.base is not None and any(a is not None and np.may_share_memory(array, a) for a in arrays)
    if aliases or not array.flags.writeable or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).copy()
    tensor = array_to_tensor(array)
    return tensor if like.is_cpu else tensor.to(like.device)


# Backend views of parameters, made once: id(parameter) -> (weak reference, where its memory is, view).
# Only views that alias the parameter's memory are kept (a numpy view of a CPU tensor, a DLPack view
# of a device tensor), so in-place updates show through them; copies (uploads to another memory
# space) are never kept: ``p.data.copy_(...)`` changes a parameter without bumping its version.
_VIEWS: dict[int, tuple[Any, tuple[Any, ...], Any]] = {}


def _aliasing_view(tensor: torch.Tensor, make: Any) -> Any:
    """``make(tensor)`` for a parameter, kept while the parameter's memory stays where it is."""
    if type(tensor) is not torch.nn.Parameter:
        return make(tensor.detach() if tensor.requires_grad else tensor)
    where = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device, make)
    entry = _VIEWS.get(id(tensor))
    if entry is not None and entry[1] == where and entry[0]() is tensor:
        return entry[2]
    view = make(tensor.detach())  # the view holds the detached alias, never the parameter itself
    key = id(tensor)
    _VIEWS[key] = (weakref.ref(tensor, lambda _ref: _VIEWS.pop(key, None)), where, view)
    return view


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor_to_array(tensor)  # bfloat16 too (an ml_dtypes view)


def _host_view(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor (kept for parameters, whose storage it leaves resizable for
    FSDP: ``_aliasing_view`` drops it when their memory moves), else a copy."""
    if tensor.is_cpu and tensor.is_contiguous():
        view: np.ndarray = _aliasing_view(tensor, resizable_array if type(tensor) is torch.nn.Parameter else _numpy)
        return view
    return _host_array(tensor)


def _to_backend(tensor: torch.Tensor, prepared: Prepared) -> Any:
    """The tensor in the backend's memory: through DLPack (zero-copy, kept for parameters) when it is
    already there, else uploaded from a host copy."""
    space = prepared.space
    if prepared.enter is not None and memory_of(tensor) == space.name:
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        return _aliasing_view(tensor, prepared.enter)
    return space.upload(_host_array(tensor))


def _to_torch(result: Any, space: MemorySpace, like: torch.Tensor) -> torch.Tensor:
    if space.from_dlpack is not None and memory_of(like) == space.name:
        return device_tensor(result)
    return _from_host(space.download(result), [], like)


def execute(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """Select (cached) and run the implementation on tensors, wishing what torch's switches say
    (``algoswap.tf32_wish``, ``algoswap.benchmark_wish``); the result is a new tensor."""
    prepared = _plan(op, request, attrs, inputs)
    like = _first(inputs)
    token = WISHES.set(torch_wishes())
    try:
        if prepared.host:
            arrays = [None if t is None else _host_view(t) for t in inputs]
            return _from_host(prepared.runner.run(arrays), arrays, like)
        moved = [None if t is None else _to_backend(t, prepared) for t in inputs]
        return _to_torch(prepared.runner.run(moved), prepared.space, like)
    finally:
        WISHES.reset(token)


def _with_absent(tensors: list[torch.Tensor], absent: str) -> list[Optional[torch.Tensor]]:
    """Put the absent optional inputs (None) back at their positions ("2" or "1,3")."""
    inputs: list[Optional[torch.Tensor]] = list(tensors)
    for position in filter(None, absent.split(",")):
        inputs.insert(int(position), None)
    return inputs


def _split_absent(inputs: Sequence[Optional[torch.Tensor]]) -> tuple[list[torch.Tensor], str]:
    return [t for t in inputs if t is not None], ",".join(str(i) for i, t in enumerate(inputs) if t is None)


# Absent optional inputs travel as a string of positions: autograd ignores a Tensor?[] argument
# holding None, and a list of ints changes the structure autograd expects back from backward.
@torch.library.custom_op("algoswap::call", mutates_args=())
def call_op(op: str, request: str, attrs: str, tensors: list[torch.Tensor], absent: str) -> torch.Tensor:
    return execute(op, request, attrs, _with_absent(tensors, absent))


@call_op.register_fake
def _fake(op: str, request: str, attrs: str, tensors: list[torch.Tensor], absent: str) -> torch.Tensor:
    inputs = _with_absent(tensors, absent)
    spec = get_registry().spec(op)
    shapes = [None if t is None else tuple(t.shape) for t in inputs]
    dtypes = [None if t is None else _DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
    call = spec.bind(shapes, dtypes, decode_attrs(attrs))
    like = next(t for t in inputs if t is not None)
    return like.new_empty(call.out_shape, dtype=_TORCH_DTYPES[call.out_dtype])


def run(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]]) -> torch.Tensor:
    """Run ``op`` on tensors: straight to the implementation when no autograd is involved, through
    ``EagerCall`` when an eager call records it, through the ``algoswap::call`` custom op when torch
    traces (torch.compile, torch.export: tensor subclasses such as fake tensors) or for meta tensors."""
    if torch.compiler.is_compiling():
        return call_custom_op(op, request, attrs, inputs)
    recording = torch.is_grad_enabled()
    graph = False
    for tensor in inputs:
        if tensor is not None:
            if type(tensor) not in _PLAIN:
                return call_custom_op(op, request, attrs, inputs)
            graph = graph or (recording and tensor.requires_grad)
    if not graph:
        return execute(op, request, attrs, inputs)
    tensors, absent = _split_absent(inputs)
    if any(t.is_meta for t in tensors):  # the custom op's meta kernel: shapes only
        return call_custom_op(op, request, attrs, inputs)
    result: torch.Tensor = EagerCall.apply(op, request, attrs, absent, *tensors)  # type: ignore[no-untyped-call]
    return result


def call_custom_op(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """``torch.ops.algoswap.call`` with optional inputs (None) allowed."""
    tensors, absent = _split_absent(inputs)
    result: torch.Tensor = torch.ops.algoswap.call(op, request, attrs, tensors, absent)
    return result


@dataclass(frozen=True)
class GradChoice:
    """How the gradient of one input is computed: the rule, the request, and why (for explain)."""

    rule: GradRule
    request: str | None
    selection: Selection | None
    note: str = ""

    @property
    def label(self) -> str:
        if self.rule.op is None:
            return f"{self.rule.wrt}: reshape of grad_output"
        if self.selection is None:
            return f"{self.rule.wrt}: {self.rule.op} unavailable ({self.note})"
        note = f" ({self.note})" if self.note else ""
        return f"{self.rule.wrt}: {self.rule.op} {self.selection.impl.qualified}{note}"


def gradient_choices(selection: Selection) -> list[GradChoice]:
    """For each gradient rule of the selected op: the forward backend's own gradient op if it
    serves the call, else the reference backend's (reported as a fallback)."""
    call = selection.call
    choices = []
    for rule in get_registry().spec(call.op).gradients:
        if call.shape(rule.wrt) is None:  # an absent optional input has no gradient
            continue
        if rule.op is None:
            choices.append(GradChoice(rule, None, None))
            continue
        shapes = [call.out_shape if name in ("grad_output", "output") else call.shape(name) for name in rule.inputs]
        choices.append(_choose_gradient(rule, shapes, call, selection.backend.name))
    return choices


def _choose_gradient(rule: GradRule, shapes: list[Any], call: OpCall, backend: str) -> GradChoice:
    """The forward backend's own gradient op, else the reference backend's, in the forward's memory space."""
    registry = get_registry()
    memory = registry.backends[backend].memory.name
    attrs = rule.attrs_for(call)  # a variadic input's rule: its first array's (the choice is the same for each)
    requests, notes = [f"{backend}:default"], [""]
    reference = registry.reference
    if reference is not None and backend != reference.name:
        requests.append(f"{reference.name}:default")
        notes.append(f"fallback: {backend} has none for this call")
    served = first_serving(registry, str(rule.op), requests, [memory] * len(requests), shapes, [call.dtype] * len(shapes), attrs)
    if isinstance(served, list):
        return GradChoice(rule, None, None, "; ".join(reason.splitlines()[0] for reason in served))
    position, chosen = served
    return GradChoice(rule, requests[position], chosen, notes[position])


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    op, request, attrs, tensors, absent = inputs
    ctx.op, ctx.request, ctx.attrs, ctx.absent = op, request, attrs, absent
    ctx.needs = [t is not None and t.requires_grad for t in _with_absent(list(tensors), absent)]
    ctx.save_for_backward(*tensors, output)


def _gradient_plan(prepared: Prepared) -> list[tuple[GradChoice, str]]:
    """The call's gradient choices with their ops' encoded attributes, worked out at its first backward pass."""
    if prepared.gradients is None:
        call = prepared.runner.selection.call
        prepared.gradients = [(c, encode_attrs(c.rule.attrs(call)) if c.rule.op and c.rule.item_attrs is None else "")
                              for c in gradient_choices(prepared.runner.selection)]
    return prepared.gradients


def _gradients(ctx: Any, grad_output: torch.Tensor) -> list[Optional[torch.Tensor]]:
    """The gradient of each present input (None where it needs none), each by its gradient op run as
    ``run`` does (straight to the implementation unless the backward pass itself records autograd)."""
    *saved, output = ctx.saved_tensors
    tensors = _with_absent(list(saved), ctx.absent)
    names = get_registry().spec(ctx.op).input_names
    grads: list[Optional[torch.Tensor]] = [None] * len(tensors)
    for choice, attrs in _gradient_plan(_plan(ctx.op, ctx.request, ctx.attrs, tensors)):
        index = names.index(choice.rule.wrt)
        if not ctx.needs[index]:
            continue
        original = tensors[index]
        if choice.rule.op is None and original is not None:
            grads[index] = grad_output.reshape(original.shape)
            continue
        if choice.request is None or choice.rule.op is None:
            raise NoImplementationError(f"{ctx.op}: no implementation of {choice.rule.op} for the gradient: {choice.note}")
        if choice.rule.item_attrs is not None:  # no module lowers to an op with a variadic input
            raise NoImplementationError(f"{ctx.op}: gradients of a variadic input through a swapped layer are not supported")
        by_name = dict(zip(names, tensors), grad_output=grad_output.contiguous(), output=output)
        grad_inputs = [by_name[name] for name in choice.rule.inputs]
        grads[index] = run(choice.rule.op, choice.request, attrs, grad_inputs)
    return [g for g, t in zip(grads, tensors) if t is not None]


def _backward(ctx: Any, grad_output: torch.Tensor) -> tuple[None, None, None, list[Optional[torch.Tensor]], None]:
    return None, None, None, _gradients(ctx, grad_output), None


call_op.register_autograd(_backward, setup_context=_setup_context)


class EagerCall(torch.autograd.Function):
    """The custom op's forward and backward for eager calls that record autograd, without the
    dispatcher's cost (torch.library's argument handling: over 100 us a call). Inputs:
    ``(op, request, attrs, absent, *tensors)``. (A ``forward`` that takes ``ctx`` is applied without
    the signature binding that a ``setup_context`` costs at every call.)"""

    @staticmethod
    def forward(ctx: Any, op: str, request: str, attrs: str, absent: str, *tensors: torch.Tensor) -> torch.Tensor:
        output = execute(op, request, attrs, _with_absent(list(tensors), absent))
        _setup_context(ctx, (op, request, attrs, tensors, absent), output)
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return (None, None, None, None, *_gradients(ctx, grad_output))
