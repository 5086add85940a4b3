"""Running registry implementations on torch tensors: the ``algoswap::call`` custom op.

One custom op serves every registered op: ``algoswap::call(op, request, attrs, inputs)``. Its fake
implementation is the op spec's shape and dtype rule, so ``torch.compile`` and ``torch.export``
trace swapped layers without graph breaks; its autograd formula calls the op's gradient ops
(declared by the spec) on the forward backend where it has them, as ``run`` runs any call.
Eager calls skip the dispatcher (over 100 us a call in torch.library's argument handling): those
that need no autograd run the implementation directly, those that record it go through
``EagerCall``, a plain autograd Function with the custom op's forward and backward. A swapped
layer's calls, and each gradient op of a call, are made from a ``CallSite`` (``prepared``): a call
like the last one there reuses what was bound for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, cast

import torch

from .._errors import NoImplementationError
from .._global import get_registry
from .._wishes import WISHES
from .._select import Selection
from .._spec import FLOAT_DTYPES, GradRule, OpCall
from ..graph._place import first_serving
from .prepared import CallSite, Prepared, bind, decode_attrs, encode_attrs, plan
from .switches import torch_wishes
from .tensors import DTYPE_NAMES, TORCH_DTYPES
from .transfer import from_host, to_torch

# The dtypes a swap_backend Model computes in (its weights and floating activations): every float dtype.
COMPUTE_DTYPES = {name: TORCH_DTYPES[name] for name in FLOAT_DTYPES}
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def selection_for(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]]) -> Selection:
    """The (cached) selection serving these tensors: ``auto`` may pick a backend in other memory."""
    return plan(op, request, attrs, inputs).runner.selection


def _execute(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]],
             site: CallSite | None) -> tuple[torch.Tensor, Prepared]:
    """The result of the call (a new tensor) and the call prepared: bound to its inputs at ``site``
    (the last call there where it still holds) or anew, run wishing what torch's switches say."""
    bound, arrays = bind(op, request, attrs, inputs) if site is None else site.bound(op, request, attrs, inputs)
    prepared = bound.prepared
    token = WISHES.set(torch_wishes())
    try:
        result = prepared.runner.run(arrays, contiguous=prepared.host)  # as transfer's numpy views and copies are
    finally:
        WISHES.reset(token)
    like = cast(torch.Tensor, inputs[bound.first])
    return (from_host(result, arrays, like) if prepared.host else to_torch(result, prepared.space, like)), prepared


def execute(op: str, request: str, attrs: str, inputs: Sequence[Optional[torch.Tensor]], site: CallSite | None = None) -> torch.Tensor:
    """Select (cached) and run the implementation on tensors, wishing what torch's switches say
    (``algoswap.tf32_wish``, ``algoswap.benchmark_wish``); the result is a new tensor."""
    return _execute(op, request, attrs, inputs, site)[0]


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
    dtypes = [None if t is None else DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in inputs]
    call = spec.bind(shapes, dtypes, decode_attrs(attrs))
    like = next(t for t in inputs if t is not None)
    return like.new_empty(call.out_shape, dtype=TORCH_DTYPES[call.out_dtype])


def run(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]], site: CallSite | None = None) -> torch.Tensor:
    """Run ``op`` on tensors: straight to the implementation when no autograd is involved, through
    ``EagerCall`` when an eager call records it, through the ``algoswap::call`` custom op when torch
    traces (torch.compile, torch.export: tensor subclasses such as fake tensors) or for meta tensors.
    ``site``: where the call is made from (its last call bound to its inputs is used again where it holds)."""
    if torch.compiler.is_compiling():
        return call_custom_op(op, request, attrs, inputs)
    return run_eager(op, request, attrs, inputs, site)


def run_eager(op: str, request: str, attrs: str, inputs: list[Optional[torch.Tensor]], site: CallSite | None = None) -> torch.Tensor:
    """``run`` outside torch's tracing (``torch.compiler.is_compiling()`` is False)."""
    recording = torch.is_grad_enabled()
    graph = False
    for tensor in inputs:
        if tensor is not None:
            if type(tensor) not in _PLAIN:
                return call_custom_op(op, request, attrs, inputs)
            graph = graph or (recording and tensor.requires_grad)
    if not graph:
        return _execute(op, request, attrs, inputs, site)[0]
    for tensor in inputs:
        if tensor is not None and tensor.is_meta:  # the custom op's meta kernel: shapes only
            return call_custom_op(op, request, attrs, inputs)
    call = (op, request, attrs, site)
    if torch._C._are_functorch_transforms_active():  # torch's own route (which refuses: EagerCall has no setup_context)
        return EagerCall.apply(call, *inputs)  # type: ignore[no-untyped-call,no-any-return]
    unwrapped = [None if t is None else _unwrap_if_dead(t) for t in inputs]  # as Function.apply does
    return _APPLY(call, *unwrapped)  # type: ignore[no-untyped-call,no-any-return]


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


def _backward(ctx: Any, grad_output: torch.Tensor) -> tuple[None, None, None, list[Optional[torch.Tensor]], None]:
    *saved, output = ctx.saved_tensors
    inputs = _with_absent(saved, ctx.absent)
    grads = _gradients(plan(ctx.op, ctx.request, ctx.attrs, inputs), inputs, output, ctx.needs, grad_output)
    return None, None, None, [g for g, t in zip(grads, inputs) if t is not None], None


call_op.register_autograd(_backward, setup_context=_setup_context)


@dataclass(frozen=True)
class GradStep:
    """How one input's gradient is computed for a prepared call: the choice, its op's encoded attributes,
    the input's position, the positions of the gradient op's inputs among the call's inputs followed by
    grad_output and output, and the call site of the gradient op."""

    choice: GradChoice
    attrs: str
    index: int
    sources: tuple[int, ...]
    site: CallSite


def _gradient_plan(prepared: Prepared) -> list[GradStep]:
    """The call's gradient steps, worked out at its first backward pass."""
    if prepared.gradients is None:
        selection = prepared.runner.selection
        call = selection.call
        names = [*get_registry().spec(call.op).input_names, "grad_output", "output"]
        prepared.gradients = [_step(choice, call, names) for choice in gradient_choices(selection)]
    return prepared.gradients


def _step(choice: GradChoice, call: OpCall, names: list[str]) -> GradStep:
    rule = choice.rule
    runs = bool(rule.op) and rule.item_attrs is None
    attrs = encode_attrs(rule.attrs(call)) if runs else ""
    sources = tuple(names.index(name) for name in rule.inputs) if runs else ()
    return GradStep(choice, attrs, names.index(rule.wrt), sources, CallSite())


def _gradients(prepared: Prepared, inputs: Sequence[Optional[torch.Tensor]], output: torch.Tensor, needs: Sequence[bool],
               grad_output: torch.Tensor, direct: bool = False) -> list[Optional[torch.Tensor]]:
    """The gradient of each input (None where it needs none), each by its gradient op run as ``run``
    does (straight to the implementation unless the backward pass itself records autograd), or straight
    to it where the caller knows ``run`` would go there (``direct``)."""
    grads: list[Optional[torch.Tensor]] = [None] * len(inputs)
    pool: list[Optional[torch.Tensor]] | None = None
    steps = _gradient_plan(prepared)
    _check_differentiable(prepared, {step.index for step in steps}, needs)
    for step in steps:
        choice, index = step.choice, step.index
        if not needs[index]:
            continue
        original = inputs[index]
        if choice.rule.op is None and original is not None:
            grads[index] = grad_output.reshape(original.shape)
            continue
        op = prepared.runner.selection.call.op
        if choice.request is None or choice.rule.op is None:
            raise NoImplementationError(f"{op}: no implementation of {choice.rule.op} for the gradient: {choice.note}")
        if choice.rule.item_attrs is not None:  # no module lowers to an op with a variadic input
            raise NoImplementationError(f"{op}: gradients of a variadic input through a swapped layer are not supported")
        if pool is None:
            pool = [*inputs, grad_output.contiguous(), output]
        grad_inputs = [pool[i] for i in step.sources]
        if direct:
            grads[index] = _execute(choice.rule.op, choice.request, step.attrs, grad_inputs, step.site)[0]
        else:
            grads[index] = run(choice.rule.op, choice.request, step.attrs, grad_inputs, step.site)
    return grads


def _check_differentiable(prepared: Prepared, covered: set[int], needs: Sequence[bool]) -> None:
    """An error naming the op and the input where a gradient is asked of an input its spec declares none for
    (autograd would take it as zero: a silent wrong answer). A second-order gradient through a swapped layer
    asks this of the first-order gradient ops, which declare no gradients of their own."""
    call = prepared.runner.selection.call
    missing = [name for i, name in enumerate(call.input_names) if i < len(needs) and needs[i] and i not in covered]
    if missing:
        raise NoImplementationError(
            f"{call.op}: no gradient with respect to {', '.join(repr(n) for n in missing)}: the op declares none "
            f"(a gradient of a gradient of a swapped layer, after backward(create_graph=True), is not supported)")


class EagerCall(torch.autograd.Function):
    """The custom op's forward and backward for eager calls that record autograd, without the
    dispatcher's cost (torch.library's argument handling: over 100 us a call). Inputs:
    ``((op, request, attrs, site), *inputs)``, absent inputs as None. (A ``forward`` that takes ``ctx``
    is applied without the signature binding that a ``setup_context`` costs at every call.)"""

    @staticmethod
    def forward(ctx: Any, call: tuple[str, str, str, CallSite | None], *inputs: Optional[torch.Tensor]) -> torch.Tensor:
        output, ctx.prepared = _execute(*call[:3], inputs, call[3])
        ctx.save_for_backward(*inputs, output)
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        *inputs, output = ctx.saved_tensors  # plain tensors, as the forward's (else it ran the custom op)
        direct = type(grad_output) in _PLAIN and not torch.is_grad_enabled() and not torch.compiler.is_compiling()
        return (None, *_gradients(ctx.prepared, inputs, output, ctx.needs_input_grad[1:], grad_output, direct))


# Function.apply's C part: what ``EagerCall.apply`` calls after its checks for functorch (``run`` makes them)
_APPLY = super(torch.autograd.Function, EagerCall).apply
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
