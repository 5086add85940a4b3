"""A planned subgraph, the one engine every front end runs: the steps in order (registry
implementations, transfers between memory spaces, PyTorch fallbacks, Python bookkeeping), each
value's slot, and when each buffer is freed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .._errors import ImplementationError
from .._records import MemorySpace
from .._runner import Runner
from .._select import Selection
from .._sizes import human_bytes, nbytes
from .._spec import Shape
from ._node import GraphError, Node


@dataclass
class Step:
    """One thing the program runs.

    ``kind``: "op" (a registry implementation, through its ``runner``), "fused" (several op nodes
    as one call: ``members``), "transfer" (a value moved to another memory space), "torch" (a node
    PyTorch runs) or "python" (an item of a value that holds arrays). The runner gives an op step's
    implementation its inputs in the memory order it takes.
    """

    name: str
    op: str
    inputs: tuple[int | None, ...]
    output: int
    fn: Callable[..., Any]  # what runs: the implementation (called through ``runner``), a move, a fallback
    attrs: dict[str, Any]
    memory: MemorySpace
    shape: Shape
    dtype: str
    kind: str = "op"
    backend: str = ""
    algorithm: str = ""
    device: str = ""
    kernel: str = ""
    node: Node | None = None
    alias: bool = False
    free: tuple[int, ...] = ()
    note: str = ""
    runner: Runner | None = None
    members: tuple[Node, ...] = ()
    input_shape: Shape | None = None
    request: str = ""

    @property
    def is_transfer(self) -> bool:
        return self.kind == "transfer"

    @property
    def selection(self) -> Selection | None:
        return None if self.runner is None else self.runner.selection

    @property
    def nbytes(self) -> int:
        return 0 if self.alias or not self.dtype else nbytes(self.shape, self.dtype)


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
    """What ``Executor.run`` executes for one subgraph and one set of input shapes and memory spaces."""

    subgraph: str
    outputs: list[Node]
    steps: list[Step]
    sources: list[tuple[int, Node]]
    output_slots: list[int | None]
    slot_count: int
    loaders: list[Any] = field(default_factory=list)
    kept: dict[int, MemorySpace] = field(default_factory=dict)  # source slots kept in a device's memory between runs
    updated_on_device: list[Node] = field(default_factory=list)  # the sources updated in place there
    fixed: list[tuple[int, Any]] = field(default_factory=list)  # slots holding values known when planning
    source_bytes: int = 0
    planned: list[Step] = field(default_factory=list)  # nodes computed when planning, from weights alone (graph._fold)

    def run(self, values: list[Any]) -> None:
        for slot, value in self.fixed:
            values[slot] = value
        for step in self.steps:
            args = [None if i is None else values[i] for i in step.inputs]
            try:
                if step.runner is None:
                    values[step.output] = step.fn(*args)
                elif step.node is not None and step.node.dynamic is not None:
                    values[step.output] = step.runner.run(args, {**step.attrs, **step.node.dynamic()})
                else:
                    values[step.output] = step.runner.run(args)
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
        return MemoryReport(peak, total, self.source_bytes)

    @property
    def transfers(self) -> list[Step]:
        return [step for step in self.steps if step.is_transfer]


def _run_error(step: Step, exc: Exception) -> Exception:
    """The error naming the node: an implementation's broken result or lack of memory keeps its class,
    as do algoswap's own errors raised inside a fallback."""
    if isinstance(exc, ImplementationError):
        return type(exc)(f"node {step.name!r}: {exc}", exc.implementation)
    where = f"{step.backend}:{step.algorithm}" if step.backend else step.note or step.kind
    return GraphError(f"node {step.name!r} (op {step.op}, {where}) failed: {type(exc).__name__}: {exc}")
