"""Planning: from a subgraph and its inputs' shapes, dtypes and memory spaces to a ``Program``.

Each node is served where ``_place`` says; a value moves to another memory space only where a
node there reads it (one transfer per value and space, shared by its readers); fusion chains are
decided before their members are selected; Python bookkeeping known from shapes alone is computed
here, once, and torch nodes get their output shapes from the ``Foreign`` runner.
"""

from __future__ import annotations

import functools
import heapq
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from .._cache import LRUCache, declare_cache
from .._errors import AlgoswapError
from .._frozen import is_frozen
from .._global import get_registry
from .._records import HOST, MemorySpace
from .._runner import Runner
from .._select import Selection, select, serves_memory
from .._sizes import nbytes
from ._fold import folded, planned_step
from ._fusion import Chain
from ._node import (SOURCE_KINDS, STORED_KINDS, Call, GraphError, Node, Origin, Pending, Shaped, dependencies, examples,
                    holds_pending, leaves, mapped, nodes_in, pending, topological)
from ._place import TORCH, inputs_space, memory_for, place
from ._program import Program, Step

Requests = Callable[[Node], Sequence[str]]


class Foreign(Protocol):
    """Runs the nodes no registry implementation serves (the torch front end provides it)."""

    def infer(self, node: Node, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The node's result with arrays as ``Shaped`` (its inputs are given that way)."""

    def runner(self, node: Node, call: Call, space: MemorySpace) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
        """A function of the resolved arguments (arrays in ``space``) giving the result in ``space``."""


@dataclass
class PlanOptions:
    """How a front end wants its graphs planned."""

    foreign: Foreign | None = None  # runs "torch" nodes, and op nodes' twins where nothing serves them
    fallback: bool = False  # op nodes nothing serves where their inputs are run as their torch twin
    chains: Sequence[Chain] = ()
    outputs_home: bool = True  # outputs moved to host memory (False: left where they were produced)


@dataclass(frozen=True)
class Arg:
    """The ``index``-th input value of a torch or python step, inside its call's arguments."""

    index: int


def schedule(outputs: Sequence[Node]) -> list[Node]:
    """Topological order in which an in-place update runs after every other reader of what it updates; of
    the nodes ready to run, the lowest ``priority`` first, then the first in graph order."""
    order = topological(outputs)
    index = {id(n): i for i, n in enumerate(order)}
    after: dict[int, set[int]] = {id(n): {id(i) for i in dependencies(n) if i is not None} for n in order}
    for node in order:
        for target in _updated_in_place(node):
            for reader in order:
                if reader is not node and target is not None and any(i is target for i in reader.inputs):
                    if not _reaches(reader, node):
                        after[id(node)].add(id(reader))
    by_id = {id(n): n for n in order}
    waiting = {key: set(deps) for key, deps in after.items()}
    ready = [(by_id[key].priority, index[key], key) for key, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    result: list[Node] = []
    users: dict[int, list[int]] = {}
    for key, deps in after.items():
        for dep in deps:
            users.setdefault(dep, []).append(key)
    while ready:
        _, _, key = heapq.heappop(ready)
        result.append(by_id[key])
        for user in users.get(key, ()):
            waiting[user].discard(key)
            if not waiting[user]:
                heapq.heappush(ready, (by_id[user].priority, index[user], user))
    return result


def _reaches(start: Node, target: Node) -> bool:
    """Whether ``start`` depends on ``target``."""
    return any(n is target for n in topological([start]))


def _updated_in_place(node: Node) -> list[Node | None]:
    """The inputs ``node`` updates in place (empty for most ops)."""
    spec = get_registry().spec(node.op) if node.kind == "op" and node.op else None
    return [node.inputs[spec.input_names.index(name)] for name in spec.in_place] if spec else []


def homes(outputs: Sequence[Node], requests: Requests) -> dict[int, MemorySpace]:
    """Where each parameter and variable updated in place lives between runs (by id): the memory
    space of the op that updates it, where that is a device's; host otherwise (not listed)."""
    found: dict[int, MemorySpace] = {}
    for node in topological(outputs):
        targets = _updated_in_place(node)
        if not targets or not all(t is not None and t.kind in ("parameter", "variable") for t in targets):
            continue
        if any(id(t) in found for t in targets):
            continue  # already homed by an earlier update
        shapes = [None if i is None else i.shape for i in node.inputs]
        dtypes = [None if i is None else i.dtype for i in node.inputs]
        chosen = place(node, requests(node), shapes, dtypes, node.attrs, HOST, False)
        if isinstance(chosen, Selection) and not chosen.backend.memory.is_host:
            found.update({id(t): chosen.backend.memory for t in targets if t is not None})
    return found


@dataclass
class _Value:
    """What planning knows of a slot: its value as ``Shaped`` (or the Python value), and where it is."""

    known: Any
    space: MemorySpace


# An Executor plans a program per set of input shapes; each moves the frozen arrays it reads (weights) to the
# memory space of the ops reading them. One copy per array and space serves them all (ResNet-18's programs on the
# SYCL device each kept its own copy of the 47 MB of weights: +1.5 GB over 32 input shapes).
UPLOADS = declare_cache("graph_uploads", 1024, "device copies of frozen arrays (weights) that planned programs read, "
                        "one per array and memory space, shared by the programs of every input shape; an entry goes "
                        "when its array dies")
_uploads: LRUCache[tuple[Any, Any]] = LRUCache(UPLOADS)


def uploaded(array: Any, space: MemorySpace) -> Any:
    """Frozen ``array`` in ``space``: the copy made before while ``array`` lives (keyed by its id, checked through a
    weak reference), else a new one."""
    key = (id(array), space.name)
    entry = _uploads.get(key)
    if entry is not None and entry[0]() is array:
        return entry[1]
    made = space.upload(array)
    _uploads.put(key, (weakref.ref(array, functools.partial(_forget_upload, key)), made))
    return made


def _forget_upload(key: tuple[int, str], ref: Any) -> None:
    entry = _uploads.get(key)
    if entry is not None and entry[0] is ref:
        _uploads.pop(key)


@dataclass
class _Builder:
    subgraph: str
    outputs: list[Node]
    fed: dict[int, tuple[Shaped, MemorySpace]]
    requests: Requests
    homes: dict[int, MemorySpace]
    options: PlanOptions
    slots: dict[int, int] = field(default_factory=dict)
    values: dict[int, _Value] = field(default_factory=dict)  # by slot
    baked: dict[int, Any] = field(default_factory=dict)  # Python values known from shapes, by node id
    moved: dict[tuple[int, str], int] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    sources: list[tuple[int, Node]] = field(default_factory=list)
    producers: dict[int, str] = field(default_factory=dict)
    source_nodes: dict[int, Node] = field(default_factory=dict)
    fixed: list[tuple[int, Any]] = field(default_factory=list)  # slots whose values planning made (weights moved once)
    folded: dict[int, Any] = field(default_factory=dict)  # slots of values computed from weights alone, when planning (frozen)
    planned: list[Step] = field(default_factory=list)  # the nodes computed then (_fold), as explain shows them
    count: int = 0

    def new_slot(self, known: Any, space: MemorySpace, producer: str) -> int:
        self.count += 1
        slot = self.count - 1
        self.values[slot] = _Value(known, space)
        self.producers[slot] = producer
        return slot

    def build(self) -> Program:
        chains = {id(c.last): c for c in self.options.chains}
        deferred = {id(m) for c in self.options.chains for m in c.members[:-1]}
        for node in schedule(self.outputs):
            if node.kind in SOURCE_KINDS:
                self.add_source(node)
            elif id(node) in chains:
                self.add_chain(chains[id(node)])
            elif node.kind == "op" and id(node) not in deferred:
                self.add_op(node)
            elif node.kind in ("torch", "python"):
                self.add_call(node, node.source)  # type: ignore[arg-type]
        fixed = self.fixed
        output_slots: list[int | None] = []
        for out in self.outputs:
            if id(out) in self.baked:
                slot = self.new_slot(self.baked[id(out)], HOST, out.name)
                fixed.append((slot, self.baked[id(out)]))
                output_slots.append(slot)
            elif id(out) in self.slots:
                slot = self.slots[id(out)]
                output_slots.append(self.slot_in(slot, HOST) if self.options.outputs_home and _is_array(self.values[slot].known) else slot)
            else:
                output_slots.append(None)
        self.set_free_lists(output_slots)
        return self.program(output_slots, fixed)

    def program(self, output_slots: list[int | None], fixed: list[tuple[int, Any]]) -> Program:
        loaders: list[Any] = []
        for _, node in self.sources:
            if node.kind == "data" and all(node.loaders is not l for l in loaders):
                loaders.append(node.loaders)
        kept = {slot: self.values[slot].space for slot, node in self.sources
                if node.kind in ("parameter", "variable") and not self.values[slot].space.is_host}
        updated = [t for s in self.steps if s.alias and not s.memory.is_host and s.node is not None
                   for t in _updated_in_place(s.node) if t is not None]
        source_bytes = sum(nbytes(k.shape, k.dtype) for slot, _ in self.sources if isinstance(k := self.values[slot].known, Shaped))
        return Program(self.subgraph, self.outputs, self.steps, self.sources, output_slots, self.count, loaders, kept,
                       updated, fixed, source_bytes, self.planned)

    # ------------------------------------------------------------------ nodes

    def add_source(self, node: Node) -> None:
        known, space = self.fed.get(id(node), (Shaped(node.shape, node.dtype), self.homes.get(id(node), HOST)))
        slot = self.slots[id(node)] = self.new_slot(known, space, node.name)
        self.sources.append((slot, node))
        self.source_nodes[slot] = node

    def array_inputs(self, node: Node, inputs: Sequence[Node | None]) -> tuple[list[Any], list[Any], list[MemorySpace | None]]:
        shapes: list[Any] = []
        dtypes: list[Any] = []
        spaces: list[MemorySpace | None] = []
        for position, i in enumerate(inputs):
            value = None if i is None else self.values[self.slots[id(i)]]
            if i is not None and (value is None or not isinstance(value.known, Shaped)):
                raise GraphError(f"node {node.name!r} ({node.op}): input {position} ({i.name}) is not an array")
            shapes.append(None if value is None else value.known.shape)
            dtypes.append(None if value is None else value.known.dtype)
            spaces.append(None if value is None else value.space)
        return shapes, dtypes, spaces

    def add_op(self, node: Node) -> None:
        twin = node.source.twin if isinstance(node.source, Origin) else None
        torch_allowed = self.options.fallback and twin is not None and self.options.foreign is not None
        unknown = self.known_at_run_time(node)
        if unknown and torch_allowed:
            assert twin is not None
            self.add_call(node, twin, note=unknown)
            return
        shapes, dtypes, spaces = self.array_inputs(node, node.inputs)
        attrs = self.resolved(node.attrs) if node.needs else node.attrs
        targets = _updated_in_place(node)
        where = inputs_space(node.inputs, spaces)
        if targets and targets[0] is not None:  # an in-place update runs where what it updates lives
            where = self.homes.get(id(targets[0]), HOST)
        chosen = place(node, self.requests(node), shapes, dtypes, attrs, where, torch_allowed)
        if chosen == TORCH:
            assert twin is not None
            self.add_call(node, twin, note=f"no implementation in {where.name} memory, where its inputs are")
            return
        assert isinstance(chosen, Selection)
        if not self.fold(node, chosen):
            self.emit(node, chosen, node.inputs, shapes)

    def known_at_run_time(self, node: Node) -> str:
        """Why a registry op cannot serve ``node`` in this plan: an input that is no array, or an attribute
        needing a value PyTorch computes at each call (``x.max().item()``); "" when nothing stops it."""
        for position, i in enumerate(node.inputs):
            known = self.values[self.slots[id(i)]].known if i is not None else None
            if i is not None and not _is_array(known):
                return f"input {position} ({i.name}) is {'a number computed at each call' if holds_pending(known) else 'no array'}"
        late = [n.name for n in node.needs if id(n) not in self.baked]
        return f"its attributes need {', '.join(map(repr, late))}, computed at each call" if late else ""

    def fold(self, node: Node, chosen: Selection) -> bool:
        """Whether ``node`` was computed now, from frozen weights alone (see ``_fold``)."""
        arrays = [None if i is None else self.frozen_source(self.slots[id(i)]) for i in node.inputs]
        if not node.inputs or any(a is None for a, i in zip(arrays, node.inputs) if i is not None):
            return False
        if any(node is out for out in self.outputs):
            return False  # an output is the caller's to write: a new array at each call
        done = folded(node, chosen, arrays)
        if done is None:
            return False
        value, runner = done
        slot = self.slots[id(node)] = self.new_slot(Shaped(value.shape, chosen.call.out_dtype), HOST, node.name)
        self.folded[slot] = value
        self.fixed.append((slot, value))
        self.planned.append(planned_step(node, runner, slot))
        return True

    def emit(self, node: Node, chosen: Selection, inputs: Sequence[Node | None], shapes: list[Any],
             name: str | None = None, label: str | None = None, members: tuple[Node, ...] = ()) -> None:
        space = chosen.backend.memory
        sources = {self.values[self.slots[id(i)]].space.name for i in inputs if i is not None and i.kind not in STORED_KINDS}
        slots = tuple(None if i is None else self.slot_in(self.slots[id(i)], space) for i in inputs)
        call = chosen.call
        slot = self.slots[id(node)] = self.new_slot(Shaped(call.out_shape, call.out_dtype), space, name or node.name)
        moved = sorted(s for s in sources if s != space.name)
        runner = Runner(chosen)
        self.steps.append(Step(
            name or node.name, label or str(node.op), slots, slot, runner.fn, dict(call.attrs), space, call.out_shape,
            call.out_dtype, "fused" if members else "op", chosen.impl.backend, chosen.impl.algorithm,
            chosen.backend.device, chosen.kernel, node, alias=bool(get_registry().spec(call.op).in_place),
            note=f"inputs moved {', '.join(moved)} → {space.name}" if moved else "", runner=runner,
            members=members, input_shape=shapes[0], request=chosen.request,
        ))

    def add_chain(self, chain: Chain) -> None:
        """The chain as one call of its head's fused twin where the head's request and memory space have
        one, chosen before any member is; else its members one by one, with the reason noted."""
        head, inputs = chain.head, chain.inputs
        shapes, dtypes, spaces = self.array_inputs(head, inputs)
        where = inputs_space(head.inputs, spaces[:len(head.inputs)])
        fused = _fused_selection(chain, self.requests(head), shapes, dtypes, where)
        if isinstance(fused, Selection):
            self.emit(chain.last, fused, inputs, shapes, name=head.name, label=chain.label, members=chain.members)
            self.slots[id(head)] = self.slots[id(chain.last)]
            return
        first = len(self.steps)
        for member in chain.members:
            self.add_op(member)
        self.steps[first].note = "; ".join(filter(None, [self.steps[first].note, f"{chain.label}: {fused}"]))

    def add_call(self, node: Node, call: Call, note: str = "") -> None:
        """A torch or python node (or an op's torch twin): its result inferred from its inputs' now."""
        inputs = [i for i in nodes_in((call.args, call.kwargs)) if id(i) not in self.baked]
        arrays = [self.values[self.slots[id(i)]] for i in inputs]
        args, kwargs = self.resolved(call.args, known=True), self.resolved(call.kwargs, known=True)
        foreign, is_python = self.options.foreign, node.kind == "python"
        if is_python:
            result = _python(node, call, args, kwargs)
            if not _holds_arrays(result) and not holds_pending(result):
                self.baked[id(node)] = result
                return
        elif foreign is None:
            raise GraphError(f"node {node.name!r} ({call.label or node.kind}) runs in PyTorch; this executor has no torch runner")
        else:
            result = foreign.infer(node, call, args, kwargs)
        where = inputs_space(inputs, [v.space for v in arrays]) if arrays else HOST
        slots = tuple(self.slot_in(self.slots[id(i)], where) if _is_array(self.values[self.slots[id(i)]].known) else self.slots[id(i)]
                      for i in inputs)
        template = self.templated((call.args, call.kwargs), inputs)
        if is_python:
            fn = _python_step(call.target, template)
        else:
            assert foreign is not None
            fn = _torch_step(foreign.runner(node, call, where), template)
        slot = self.slots[id(node)] = self.new_slot(result, where, node.name)
        first = next((v.known for v in arrays if isinstance(v.known, Shaped)), None)
        shape, dtype = (result.shape, result.dtype) if isinstance(result, Shaped) else ((), "")
        kind = "python" if is_python else "torch"
        self.steps.append(Step(node.name, call.label or kind, slots, slot, fn, {}, where, shape, dtype, kind,
                               device=where.name, node=node, note=note or call.reason,
                               input_shape=None if first is None else first.shape))

    # ------------------------------------------------------------------ values

    def resolved(self, value: Any, known: bool = False) -> Any:
        """``value`` with nodes replaced by their Python values (and, with ``known``, arrays by ``Shaped``)."""
        return mapped(value, lambda v: self.value_of(v, known) if isinstance(v, Node) else v)

    def value_of(self, node: Node, known: bool) -> Any:
        if id(node) in self.baked:
            return self.baked[id(node)]
        if known:
            return self.values[self.slots[id(node)]].known
        raise GraphError(f"an attribute needs the value of node {node.name!r}, which is not known when planning")

    def templated(self, value: Any, inputs: list[Node]) -> Any:
        """``value`` with baked nodes replaced by their values and the others by ``Arg``s."""
        def leaf(v: Any) -> Any:
            if not isinstance(v, Node):
                return v
            return self.baked[id(v)] if id(v) in self.baked else Arg(next(k for k, i in enumerate(inputs) if i is v))

        return mapped(value, leaf)

    def slot_in(self, slot: int, space: MemorySpace) -> int:
        """The slot holding the value of ``slot`` in ``space``, adding a transfer the first time."""
        value = self.values[slot]
        if value.space.name == space.name or not _is_array(value.known):
            return slot
        key = (slot, space.name)
        if key not in self.moved and self.frozen_source(slot) is not None:
            self.moved[key] = moved = self.new_slot(value.known, space, f"{self.producers[slot]}->{space.name}")
            self.fixed.append((moved, uploaded(self.frozen_source(slot), space)))  # a weight nothing can change: moved once
        if key not in self.moved:
            source = value.space
            if not source.is_host and not space.is_host:
                slot, source = self.slot_in(slot, HOST), HOST
            producer = self.producers[slot]
            self.moved[key] = moved = self.new_slot(value.known, space, f"{producer}->{space.name}")
            fn = source.download if space.is_host else space.upload
            self.steps.append(Step(
                f"{producer}->{space.name}", "transfer", (slot,), moved, fn, {}, space, value.known.shape, value.known.dtype,
                "transfer", device=space.name, note=f"{'host' if source.is_host else source.name} -> {space.name}",
            ))
        return self.moved[key]

    def frozen_source(self, slot: int) -> Any:
        """The frozen host array of a constant source in ``slot`` (``algoswap.freeze``) or of a value computed
        from such arrays when planning, else None."""
        if slot in self.folded:
            return self.folded[slot]
        node = self.source_nodes.get(slot)
        return node.host if node is not None and node.kind == "constant" and is_frozen(node.host) else None

    def set_free_lists(self, output_slots: list[int | None]) -> None:
        """Free each produced value after the last step reading it (outputs and sources are kept)."""
        keep = {s for s in output_slots if s is not None} | {s for s, _ in self.sources}
        last: dict[int, int] = {}
        for index, step in enumerate(self.steps):
            for slot in step.inputs:
                if slot is not None:
                    last[slot] = index
            last.setdefault(step.output, index)
        frees: dict[int, list[int]] = {}
        for slot, index in last.items():
            if slot not in keep:
                frees.setdefault(index, []).append(slot)
        for index, step in enumerate(self.steps):
            step.free = tuple(sorted(frees.get(index, ())))


def _fused_selection(chain: Chain, requests: Sequence[str], shapes: list[Any], dtypes: list[Any],
                     where: MemorySpace) -> Selection | str:
    """The selection of the chain's fused twin, or why it runs unfused. It must come from the backend
    that leads for the head's op where the head runs (fused or not, the same backend serves it)."""
    request, twin, head = requests[0], chain.twin.spec.name, str(chain.head.op)
    attrs = chain.fused_attrs(chain.head.attrs)
    try:
        fused = select(get_registry(), twin, shapes, dtypes, attrs, request, memory_for(request, where))
    except AlgoswapError as exc:
        reasons = _reasons(getattr(exc, "rejected", ()), request.partition(":")[0] if ":" in request else None)
        return f"not fused: {request!r} has no {twin} serving this call ({reasons or str(exc).splitlines()[0]})"
    leader = _leading_backend(head, request, memory_for(request, where))
    if leader is not None and get_registry().backends[leader].priority > fused.backend.priority:
        reasons = _reasons(fused.rejected, leader)
        return (f"not fused: {fused.impl.qualified} has a {twin}, but {head} runs on {leader}, which has none for "
                f"this call{f' ({reasons})' if reasons else ''}")
    return fused


def _reasons(rejected: Sequence[tuple[str, str]], backend: str | None) -> str:
    """Why the candidates of ``backend`` (None: every one) were passed over, in one line."""
    return "; ".join(f"{name}: {reason}" for name, reason in rejected if backend is None or name.startswith(f"{backend}:"))


def _leading_backend(op: str, request: str, memory: str | None) -> str | None:
    """The highest-ranked available backend offering ``op`` for ``request`` in ``memory``."""
    registry = get_registry()
    named = request.partition(":")[0] if ":" in request else None
    best: tuple[int, str] | None = None
    for impl in registry.implementations(op):
        backend = registry.backends[impl.backend]
        if named is not None and impl.backend != named:
            continue
        if not serves_memory(backend, memory):
            continue
        if backend.availability() is True and (best is None or backend.priority > best[0]):
            best = (backend.priority, impl.backend)
    return None if best is None else best[1]


def _python(node: Node, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The node's value now; pending (computed at each call) where it reads a value PyTorch computes at each call."""
    if holds_pending((args, kwargs)):
        try:
            return pending(call.target(*examples(args), **examples(kwargs)))
        except Exception:
            return Pending(None)  # e.g. a guard on the examples: it is checked at each call
    try:
        return call.target(*args, **kwargs)
    except Exception as exc:
        raise GraphError(f"node {node.name!r} ({call.label or 'python'}) failed when planning: {type(exc).__name__}: {exc}") from exc


def _python_step(function: Callable[..., Any], template: Any) -> Callable[..., Any]:
    args, kwargs = template

    def run(*values: Any) -> Any:
        return function(*_filled(args, values), **_filled(kwargs, values))

    return run


def _torch_step(runner: Callable[[tuple[Any, ...], dict[str, Any]], Any], template: Any) -> Callable[..., Any]:
    args, kwargs = template

    def run(*values: Any) -> Any:
        return runner(_filled(args, values), _filled(kwargs, values))

    return run


def _filled(value: Any, values: tuple[Any, ...]) -> Any:
    return mapped(value, lambda v: values[v.index] if isinstance(v, Arg) else v)


def _is_array(known: Any) -> bool:
    return isinstance(known, Shaped)


def _holds_arrays(value: Any) -> bool:
    return any(isinstance(n, Shaped) for n in leaves(value))


def build_program(subgraph: str, outputs: Sequence[Node], fed: dict[int, tuple[Shaped, MemorySpace]], requests: Requests,
                  homes: dict[int, MemorySpace] | None = None, options: PlanOptions | None = None) -> Program:
    """Plan ``outputs`` for the fed sources' (Shaped, memory space), keyed by id(node); ``homes``:
    the parameters and variables living in a device's memory (see ``homes()``)."""
    return _Builder(subgraph, list(outputs), dict(fed), requests, homes or {}, options or PlanOptions()).build()
