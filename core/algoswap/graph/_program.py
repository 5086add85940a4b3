"""A planned subgraph: the steps in order, each node's implementation and memory space, the
transfers between memory spaces, and when each buffer is freed."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .._errors import AlgoswapError, ImplementationError
from .._global import get_registry
from .._records import HOST, MemorySpace
from .._runner import Runner
from .._select import Selection, select
from .._sizes import human_bytes, nbytes
from .._spec import Shape
from ._node import SOURCE_KINDS, GraphError, Node, topological

Requests = Callable[[Node], Sequence[str]]


@dataclass
class Step:
    """One thing the program runs: an op node, or a transfer of a value to another memory space."""

    name: str
    op: str
    inputs: tuple[int | None, ...]
    output: int
    fn: Callable[..., Any]
    attrs: dict[str, Any]
    memory: MemorySpace
    shape: Shape
    dtype: str
    backend: str = ""
    algorithm: str = ""
    device: str = ""
    kernel: str = ""
    node: Node | None = None
    alias: bool = False
    contiguous: bool = False
    free: tuple[int, ...] = ()
    note: str = ""
    runner: Runner | None = None  # an op step's implementation, run and checked (None: a transfer)

    @property
    def is_transfer(self) -> bool:
        return self.op == "transfer"

    @property
    def nbytes(self) -> int:
        return 0 if self.alias else nbytes(self.shape, self.dtype)


@dataclass(frozen=True)
class MemoryReport:
    """Bytes of the values the steps produce: at the peak (buffers freed after their last reader)
    against keeping every value; inputs and parameters (``source_bytes``) are counted apart."""

    peak_bytes: int
    keep_all_bytes: int
    source_bytes: int

    @property
    def ratio(self) -> float:
        return self.peak_bytes / self.keep_all_bytes if self.keep_all_bytes else 1.0

    def __str__(self) -> str:
        return (f"peak {human_bytes(self.peak_bytes)} vs {human_bytes(self.keep_all_bytes)} keeping every value "
                f"({self.ratio:.2f}x); inputs and parameters {human_bytes(self.source_bytes)}")


@dataclass
class Program:
    """What ``Executor.run`` executes for one subgraph and one set of input shapes."""

    subgraph: str
    outputs: list[Node]
    steps: list[Step]
    sources: list[tuple[int, Node]]
    output_slots: list[int | None]
    slot_count: int
    loaders: list[Any] = field(default_factory=list)
    kept: dict[int, MemorySpace] = field(default_factory=dict)  # source slots kept in a device's memory between runs
    updated_on_device: list[Node] = field(default_factory=list)  # the sources updated in place there

    def run(self, values: list[Any]) -> None:
        for step in self.steps:
            args = [None if i is None else values[i] for i in step.inputs]
            if step.contiguous:
                args = [a if a is None or type(a) is not np.ndarray or a.flags.c_contiguous else np.ascontiguousarray(a) for a in args]
            attrs = step.attrs
            if step.node is not None and step.node.dynamic is not None:
                attrs = {**attrs, **step.node.dynamic()}
            try:
                values[step.output] = step.fn(*args) if step.runner is None else step.runner.run(args, attrs)
            except Exception as exc:
                raise _run_error(step, exc) from exc
            for slot in step.free:
                values[slot] = None

    def memory(self) -> MemoryReport:
        live = peak = total = 0
        sizes: dict[int, int] = {}
        for step in self.steps:
            sizes[step.output] = step.nbytes
            live += step.nbytes
            total += step.nbytes
            peak = max(peak, live)
            live -= sum(sizes.get(slot, 0) for slot in step.free)
        sources = sum(nbytes(node.shape, node.dtype) for _, node in self.sources)
        return MemoryReport(peak, total, sources)

    @property
    def transfers(self) -> list[Step]:
        return [step for step in self.steps if step.is_transfer]


def _run_error(step: Step, exc: Exception) -> Exception:
    """The error naming the node: an implementation's broken result or lack of memory keeps its class."""
    if isinstance(exc, ImplementationError):
        return type(exc)(f"node {step.name!r}: {exc}", exc.implementation)
    where = f"{step.backend}:{step.algorithm}" if step.backend else step.note
    return GraphError(f"node {step.name!r} (op {step.op}, {where}) failed: {type(exc).__name__}: {exc}")


def schedule(outputs: Sequence[Node]) -> list[Node]:
    """Topological order in which an in-place update runs after every other reader of what it updates."""
    order = topological(outputs)
    index = {id(n): i for i, n in enumerate(order)}
    after: dict[int, set[int]] = {id(n): {id(i) for i in n.inputs if i is not None} for n in order}
    for node in order:
        if node.kind == "op" and node.op is not None:
            for name in get_registry().spec(node.op).in_place:
                target = node.inputs[node.call.input_names.index(name)] if node.call else None
                for reader in order:
                    if reader is not node and target is not None and any(i is target for i in reader.inputs):
                        if not _reaches(reader, node):
                            after[id(node)].add(id(reader))
    by_id = {id(n): n for n in order}
    waiting = {key: set(deps) for key, deps in after.items()}
    ready = [(index[key], key) for key, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    result: list[Node] = []
    users: dict[int, list[int]] = {}
    for key, deps in after.items():
        for dep in deps:
            users.setdefault(dep, []).append(key)
    while ready:
        _, key = heapq.heappop(ready)
        result.append(by_id[key])
        for user in users.get(key, ()):
            waiting[user].discard(key)
            if not waiting[user]:
                heapq.heappush(ready, (index[user], user))
    return result


def _reaches(start: Node, target: Node) -> bool:
    """Whether ``start`` depends on ``target``."""
    return any(n is target for n in topological([start]))


def _choose(node: Node, shapes: list[Any], dtypes: list[Any], requests: Sequence[str], memory: str | None) -> Selection:
    assert node.op is not None
    errors = []
    for request in requests:
        try:
            return select(get_registry(), node.op, shapes, dtypes, node.attrs, request, memory)
        except AlgoswapError as exc:
            errors.append(str(exc))
    raise GraphError(f"node {node.name!r} ({node.op}): " + "; ".join(errors))


PERSISTENT = ("parameter", "variable")


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
        if not targets or not all(t is not None and t.kind in PERSISTENT for t in targets):
            continue
        if any(id(t) in found for t in targets):
            continue  # already homed by an earlier update
        shapes = [None if i is None else i.shape for i in node.inputs]
        chosen = _choose(node, shapes, [None if i is None else i.dtype for i in node.inputs], requests(node), None)
        if not chosen.backend.memory.is_host:
            found.update({id(t): chosen.backend.memory for t in targets if t is not None})
    return found


class _Builder:
    def __init__(self, subgraph: str, outputs: Sequence[Node], shapes: dict[int, tuple[Shape, str]], requests: Requests,
                 homes: dict[int, MemorySpace]) -> None:
        self.subgraph, self.outputs, self.shapes, self.requests, self.homes = subgraph, list(outputs), shapes, requests, homes
        self.slots: dict[int, int] = {}
        self.where: dict[int, MemorySpace] = {}
        self.moved: dict[tuple[int, str], int] = {}
        self.steps: list[Step] = []
        self.sources: list[tuple[int, Node]] = []
        self.count = 0

    def new_slot(self) -> int:
        self.count += 1
        return self.count - 1

    def build(self) -> Program:
        for node in schedule(self.outputs):
            if node.kind in SOURCE_KINDS:
                slot = self.slots[id(node)] = self.new_slot()
                self.where[slot] = self.homes.get(id(node), HOST)
                self.sources.append((slot, node))
            elif node.kind == "op":
                self.add_op(node)
        output_slots = [self.host_slot(self.slots[id(n)]) if id(n) in self.slots else None for n in self.outputs]
        self.set_free_lists(output_slots)
        loaders: list[Any] = []
        for _, node in self.sources:
            if node.kind == "data" and all(node.loaders is not l for l in loaders):
                loaders.append(node.loaders)
        kept = {slot: self.where[slot] for slot, _ in self.sources if not self.where[slot].is_host}
        updated = [t for s in self.steps if s.alias and not s.memory.is_host and s.node is not None
                   for t in _updated_in_place(s.node) if t is not None]
        return Program(self.subgraph, self.outputs, self.steps, self.sources, output_slots, self.count, loaders, kept, updated)

    def add_op(self, node: Node) -> None:
        assert node.op is not None
        known = [None if i is None else self.shapes[id(i)] for i in node.inputs]
        targets = _updated_in_place(node)
        memory = None  # an in-place update runs where what it updates lives
        if targets:
            memory = self.homes.get(id(targets[0]), HOST).name if targets[0] is not None else "host"
        chosen = _choose(node, [None if k is None else k[0] for k in known], [None if k is None else k[1] for k in known],
                         self.requests(node), memory)
        space = chosen.backend.memory
        inputs = tuple(None if i is None else self.slot_in(self.slots[id(i)], space) for i in node.inputs)
        in_place = bool(get_registry().spec(node.op).in_place)
        slot = self.slots[id(node)] = self.new_slot()
        self.where[slot] = space
        self.shapes[id(node)] = (chosen.call.out_shape, node.dtype)
        layout = getattr(chosen.impl, "layout", "contiguous")
        self.steps.append(Step(
            node.name, node.op, inputs, slot, chosen.impl.callable, dict(chosen.call.attrs), space, chosen.call.out_shape,
            node.dtype, chosen.impl.backend, chosen.impl.algorithm, chosen.backend.device, chosen.kernel, node,
            alias=in_place, contiguous=space.is_host and layout == "contiguous", runner=Runner(chosen),
        ))

    def slot_in(self, slot: int, space: MemorySpace) -> int:
        """The slot holding the value of ``slot`` in ``space``, adding a transfer the first time."""
        source = self.where[slot]
        if source.name == space.name:
            return slot
        key = (slot, space.name)
        if key not in self.moved:
            if not source.is_host and not space.is_host:
                slot, source = self.slot_in(slot, HOST), HOST
            self.moved[key] = moved = self.new_slot()
            self.where[moved] = space
            producer = self.producer_name(slot)
            fn = source.download if space.is_host else space.upload
            shape, dtype = self.slot_shape(slot)
            self.steps.append(Step(
                f"{producer}->{space.name}", "transfer", (slot,), moved, fn, {}, space, shape, dtype,
                device=space.name, note=f"{'host' if source.is_host else source.name} -> {space.name}",
            ))
        return self.moved[key]

    def host_slot(self, slot: int) -> int:
        return self.slot_in(slot, HOST)

    def producer_name(self, slot: int) -> str:
        for step in self.steps:
            if step.output == slot:
                return step.name
        return next(node.name for s, node in self.sources if s == slot)

    def slot_shape(self, slot: int) -> tuple[Shape, str]:
        for step in self.steps:
            if step.output == slot:
                return step.shape, step.dtype
        node = next(node for s, node in self.sources if s == slot)
        return self.shapes[id(node)]

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


def build_program(subgraph: str, outputs: Sequence[Node], shapes: dict[int, tuple[Shape, str]], requests: Requests,
                  homes: dict[int, MemorySpace] | None = None) -> Program:
    """Plan ``outputs`` for inputs of these (shape, dtype), keyed by id(node); ``homes``: the
    parameters and variables living in a device's memory (see ``homes()``)."""
    return _Builder(subgraph, outputs, dict(shapes), requests, homes or {}).build()
