"""Running registry implementations on torch tensors: the ``algoswap::call`` custom op.

One custom op serves every registered op: ``algoswap::call(op, request, attrs, inputs)``. Its fake
implementation is the op spec's shape and dtype rule, so ``torch.compile`` and ``torch.export``
trace swapped layers without graph breaks; its autograd formula calls the op's gradient ops
(declared by the spec) through the same custom op, on the forward backend where it has them.
Eager calls that need no autograd skip the dispatcher and run the implementation directly.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from .._errors import NoImplementationError
from .._global import get_registry
from .._records import resolve_ref
from .._select import Selection, select
from .._spec import GradRule, OpCall

REFERENCE_BACKEND = "numpy"
_TORCH_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "bool": torch.bool,
}
_DTYPE_NAMES = {v: k for k, v in _TORCH_DTYPES.items()}
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def encode_attrs(attrs: dict[str, Any]) -> str:
    """Attributes as the custom op's string argument (canonical JSON: tuples become lists)."""
    return json.dumps(attrs, sort_keys=True)


@functools.lru_cache(maxsize=4096)
def decode_attrs(text: str) -> dict[str, Any]:
    return dict(json.loads(text))


def memory_of(tensor: torch.Tensor) -> str:
    """The memory-space name of a tensor's device: "host" for the CPU, else the device type."""
    return "host" if tensor.device.type == "cpu" else tensor.device.type


def selection_for(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> Selection:
    """The (cached) selection serving these tensors: ``auto`` may pick a backend in other memory."""
    present = [t for t in inputs if t is not None]
    memory = None if request == "auto" else memory_of(present[0])
    shapes = [None if t is None else tuple(t.shape) for t in inputs]
    dtypes = [None if t is None else _DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
    return select(get_registry(), op, shapes, dtypes, decode_attrs(attrs), request, memory)


def _to_backend(tensor: torch.Tensor, selection: Selection) -> Any:
    """The tensor as the backend's array: zero-copy for contiguous CPU tensors on host backends
    and, through DLPack, for tensors already in the backend's memory."""
    space = selection.backend.memory
    tensor = tensor.detach()
    if space.is_host:
        return tensor.cpu().contiguous().numpy()
    if space.from_dlpack is not None and memory_of(tensor) == space.name:
        return resolve_ref(space.from_dlpack)(tensor.contiguous())
    return space.upload(tensor.cpu().contiguous().numpy())


def _to_torch(result: Any, selection: Selection, like: torch.Tensor, arrays: list[Any]) -> torch.Tensor:
    """The backend's result as a new tensor on ``like``'s device (never aliasing an input)."""
    space = selection.backend.memory
    if not space.is_host and space.from_dlpack is not None and memory_of(like) == space.name:
        return torch.from_dlpack(result)
    array = result if space.is_host else space.download(result)
    if not array.flags.writeable or any(isinstance(a, np.ndarray) and np.may_share_memory(array, a) for a in arrays):
        array = array.copy()
    return torch.from_numpy(np.ascontiguousarray(array)).to(like.device)


def execute(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """Select (cached) and run the implementation on tensors; the result is a new tensor."""
    selection = selection_for(op, request, attrs, inputs)
    arrays = [None if t is None else _to_backend(t, selection) for t in inputs]
    result = selection.impl.callable(*arrays, **selection.call.attrs)
    like = next(t for t in inputs if t is not None)
    return _to_torch(result, selection, like, arrays)


@torch.library.custom_op("algoswap::call", mutates_args=())
def call_op(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]]) -> torch.Tensor:
    return execute(op, request, attrs, inputs)


@call_op.register_fake
def _fake(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]]) -> torch.Tensor:
    spec = get_registry().spec(op)
    shapes = [None if t is None else tuple(t.shape) for t in inputs]
    dtypes = [None if t is None else _DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
    call = spec.bind(shapes, dtypes, decode_attrs(attrs))
    like = next(t for t in inputs if t is not None)
    return like.new_empty(call.out_shape, dtype=_TORCH_DTYPES[call.dtype])


def run(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]]) -> torch.Tensor:
    """Run ``op`` on tensors: straight to the implementation when no autograd or tracing is
    involved, through the ``algoswap::call`` custom op otherwise."""
    if all(t is None or type(t) in _PLAIN for t in inputs) and not (
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
    ):
        return execute(op, request, attrs, inputs)
    return torch.ops.algoswap.call(op, request, attrs, inputs)


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
        if rule.op is None:
            choices.append(GradChoice(rule, None, None))
            continue
        shapes = [call.out_shape if name == "grad_output" else call.shape(name) for name in rule.inputs]
        choices.append(_choose_gradient(rule, shapes, call, selection.backend.name))
    return choices


def _choose_gradient(rule: GradRule, shapes: list[Any], call: OpCall, backend: str) -> GradChoice:
    registry = get_registry()
    memory = registry.backends[backend].memory.name
    attrs = rule.attrs(call)
    tries = [(f"{backend}:default", "")]
    if backend != REFERENCE_BACKEND:
        tries.append((f"{REFERENCE_BACKEND}:default", f"fallback: {backend} has none for this call"))
    reasons = []
    for request, note in tries:
        try:
            chosen = select(registry, str(rule.op), shapes, [call.dtype] * len(shapes), attrs, request, memory)
            return GradChoice(rule, request, chosen, note)
        except NoImplementationError as exc:
            reasons.append(str(exc).splitlines()[0])
    return GradChoice(rule, None, None, "; ".join(reasons))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    op, request, attrs, tensors = inputs
    ctx.op, ctx.request, ctx.attrs = op, request, attrs
    ctx.needs = [t is not None and t.requires_grad for t in tensors]
    ctx.save_for_backward(*[t for t in tensors if t is not None])
    ctx.present = [t is not None for t in tensors]


def _backward(ctx: Any, grad_output: torch.Tensor) -> tuple[None, None, None, list[Optional[torch.Tensor]]]:
    saved = iter(ctx.saved_tensors)
    tensors = [next(saved) if present else None for present in ctx.present]
    selection = selection_for(ctx.op, ctx.request, ctx.attrs, tensors)
    names = get_registry().spec(ctx.op).input_names
    grads: list[Optional[torch.Tensor]] = [None] * len(tensors)
    for choice in gradient_choices(selection):
        index = names.index(choice.rule.wrt)
        if not ctx.needs[index]:
            continue
        if choice.rule.op is None:
            grads[index] = grad_output.reshape(tensors[index].shape)
            continue
        if choice.request is None:
            raise NoImplementationError(f"{ctx.op}: no implementation of {choice.rule.op} for the gradient: {choice.note}")
        by_name = dict(zip(names, tensors), grad_output=grad_output.contiguous())
        grad_inputs = [by_name[name] for name in choice.rule.inputs]
        grads[index] = torch.ops.algoswap.call(choice.rule.op, choice.request, encode_attrs(choice.rule.attrs(selection.call)), grad_inputs)
    return None, None, None, grads


call_op.register_autograd(_backward, setup_context=_setup_context)
