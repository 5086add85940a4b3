"""The executor: runs named subgraphs ("train", "validate") with every node's implementation chosen
by the registry, transfers between memory spaces inserted, and buffers freed after their last reader."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .._cache import LRUCache
from .._core_caches import GRAPH_PROGRAMS
from .._global import get_registry
from .._records import HOST, MemorySpace
from .._runner import holds
from .._requests import Selector, Subject, assign, selector_argument
from .._select import select
from .._spec import Shape
from ._capture import Captures
from ._node import GraphError, Node, Shaped, topological
from ._explain import PlanText, explain_program
from ._plan import PlanOptions, build_program, homes
from ._program import MemoryReport, Program
from ._residence import Residence

class Executor:
    """Runs subgraphs given as ``{"train": [loss, train_op], "validate": [loss, logits]}`` (or one list).

    ``algorithm`` is a selector as in the swap API (``algos`` and ``algorithms`` are its old names):
    one request ("numpy:smm"; "dnnl:default" prefers dnnl), a dict from nodes, node names or op
    names to requests (or, for an op, to a list in graph order, a function of the node and its
    input shape, ``prefer(...)``), or such a list or function for every op node. A node's own
    request (``op(..., algorithm=)``) comes next. ``backends`` (e.g. ``["numpy"]`` or
    ``["dnnl", "numpy"]``): nodes without a request run on the first listed backend that implements
    their op and serves the call; None: the registry's ranking, in the memory space of each node's
    inputs (see ``graph._place``: data moves to a device only where a request names its backend).
    ``plan_memory=False`` keeps every value (to compare). ``capture``: replay each program as one
    device graph where its memory space can (a CUDA graph; see ``graph._capture``): True, False, or
    None to follow ALGOSWAP_CAPTURE; ``captures.last`` says how the latest run went.
    """

    def __init__(
        self,
        subgraphs: Mapping[str, Sequence[Node]] | Sequence[Node],
        algorithm: Selector = None,
        backends: Sequence[str] | None = None,
        plan_memory: bool = True,
        options: PlanOptions | None = None,
        *,
        capture: bool | None = False,
        algos: Selector = None,
        algorithms: Selector = None,
    ) -> None:
        self.subgraphs = dict(subgraphs) if isinstance(subgraphs, Mapping) else {"default": list(subgraphs)}
        for name, outputs in self.subgraphs.items():
            if not outputs or not all(isinstance(n, Node) for n in outputs):
                raise GraphError(f"Executor: subgraph {name!r} must be a non-empty list of nodes")
        self.algorithm = selector_argument("Executor", algorithm, algos=algos, algorithms=algorithms)
        self.backends = list(backends) if backends is not None else None
        self.plan_memory = plan_memory
        self.options = options or PlanOptions()
        self.last: Program | None = None  # the program of the latest run
        self._sources: dict[str, list[Node]] = {}
        self.programs: LRUCache[Program] = LRUCache(GRAPH_PROGRAMS)
        self.residence = Residence()
        self.captures = Captures(capture)
        self._homes: dict[int, Any] | None = None
        self._setups: dict[str, list[Node]] = {}  # per subgraph: its nodes with a setup
        self._set_up: set[int] = set()  # the nodes whose setup ran
        self._requests = self._assign_requests()

    def _assign_requests(self) -> dict[int, str]:
        """Every op node's request (by id), from the selector, the node's own request and ``backends``."""
        nodes = list({id(n): n for outputs in self.subgraphs.values() for n in topological(outputs) if n.kind == "op"}.values())
        subjects = [Subject(str(n.op), n.name, n, _input_shape(n), aliases=(n,), noun="node",
                            own=None if n.request == "default" else n.request) for n in nodes]
        requests = assign("Executor", subjects, self.algorithm, self.backends, _serves)
        return {id(n): request for n, request in zip(nodes, requests)}

    def requests(self, node: Node) -> list[str]:
        """The requests tried for ``node``, in order."""
        return [self._requests.get(id(node), node.request)]

    # ------------------------------------------------------------------ planning

    def plan(self, subgraph: str | None = None, feed: Mapping[Any, Any] | None = None) -> Program:
        """The program of ``subgraph`` for inputs like ``feed`` (default: the placeholders' shapes,
        in host memory): arrays, or ``Shaped`` stand-ins for host arrays of that shape and dtype."""
        name = self._subgraph_name(subgraph)
        outputs = self.subgraphs[name]
        fed = self._fed(name, outputs, feed or {})
        key = (name, tuple(sorted((k, v[0], v[1].name) for k, v in fed.items())))
        program: Program | None = self.programs.get(key)
        if program is None:
            program = self.programs.put(key, build_program(name, outputs, fed, self.requests, self.homes(), self.options))
            if not self.plan_memory:
                for step in program.steps:
                    step.free = ()
        return program

    def homes(self) -> dict[int, Any]:
        """Parameters and variables (by id) that live in a device's memory between runs: those an op
        of any subgraph updates in place there (an optimizer update on the GPU)."""
        if self._homes is None:
            self._homes = homes([n for outputs in self.subgraphs.values() for n in outputs], self.requests)
        return self._homes

    def _subgraph_name(self, subgraph: str | None) -> str:
        if subgraph is None:
            if len(self.subgraphs) == 1:
                return next(iter(self.subgraphs))
            raise GraphError(f"Executor: name the subgraph to run ({', '.join(self.subgraphs)})")
        if subgraph not in self.subgraphs:
            raise GraphError(f"Executor: no subgraph named {subgraph!r} (have {', '.join(self.subgraphs)})")
        return subgraph

    def _fed_nodes(self, name: str) -> list[Node]:
        """The placeholders and data nodes of a subgraph (found once)."""
        found = self._sources.get(name)
        if found is None:
            found = self._sources[name] = [n for n in topological(self.subgraphs[name]) if n.kind in ("placeholder", "data")]
        return found

    def _fed(self, name: str, outputs: Sequence[Node], feed: Mapping[Any, Any]) -> dict[int, tuple[Shaped, MemorySpace]]:
        """The shape, dtype and memory space of every placeholder and data node, by id."""
        fed: dict[int, tuple[Shaped, MemorySpace]] = {}
        for node in self._fed_nodes(name):
            if node.kind == "data" and name not in node.loaders:
                raise GraphError(f"data node {node.name!r} has no DataLoader for subgraph {name!r} (has {', '.join(node.loaders)})")
            if node.kind in ("placeholder", "data"):
                value = _lookup(feed, node)
                known = Shaped(node.shape, node.dtype) if value is None else _shaped(value)
                if node.dtype and known.dtype != node.dtype:
                    raise GraphError(f"{node.kind} {node.name!r}: fed dtype {known.dtype}; expected {node.dtype}")
                fed[id(node)] = (known, HOST if value is None or isinstance(value, (Shaped, np.ndarray)) else space_of(value))
        return fed

    # ------------------------------------------------------------------ running

    def run(self, subgraph: str | None = None, feed: Mapping[Any, Any] | None = None) -> list[Any]:
        """Run one subgraph: placeholders from ``feed`` ({node or name: array}), data nodes from their
        loader for this subgraph (one batch). Returns the outputs' values (None for update groups)."""
        name = self._subgraph_name(subgraph)
        self._run_setups(name)
        feed = dict(feed or {})
        batches = self._next_batches(name)
        program = self.last = self.plan(name, {**feed, **{k: v for k, v in batches.items()}})
        values: list[Any] = [None] * program.slot_count
        for slot, node in program.sources:
            space = program.kept.get(slot)
            values[slot] = self._source_value(node, feed, batches) if space is None else self.residence.value(node, space)
        outputs = self.captures.run(program, values)
        self.residence.updated(program.updated_on_device)
        return outputs

    def _run_setups(self, name: str) -> None:
        """The ``setup`` of each node the subgraph reaches, once per Executor (at the first run reaching it)."""
        nodes = self._setups.get(name)
        if nodes is None:
            nodes = self._setups[name] = [n for n in topological(self.subgraphs[name]) if n.setup is not None]
        for node in nodes:
            if id(node) not in self._set_up and node.setup is not None:
                self._set_up.add(id(node))
                node.setup()

    def _next_batches(self, name: str) -> dict[str, np.ndarray]:
        batches: dict[str, np.ndarray] = {}
        seen: list[Any] = []
        for node in self._fed_nodes(name):
            if node.kind == "data" and name in node.loaders:
                loader = node.loaders[name]
                if all(loader is not other for other, _ in seen):
                    seen.append((loader, loader.next_batch()))
                batch = next(b for other, b in seen if other is loader)
                batches[node.name] = batch[node.component]
        return batches

    def _source_value(self, node: Node, feed: Mapping[Any, Any], batches: Mapping[str, Any]) -> Any:
        if node.kind == "data":
            return batches[node.name]
        if node.kind != "placeholder":
            return node.value
        value = _lookup(feed, node)
        if value is None:
            raise GraphError(f"placeholder {node.name!r} {node.shape} {node.dtype} was not fed (feed={{node: array}})")
        if type(value) is np.ndarray:
            return value if value.flags.c_contiguous else np.ascontiguousarray(value)
        return value if not space_of(value).is_host else np.ascontiguousarray(value)  # a device's array stays there

    def batches(self, subgraph: str) -> int:
        """Batches per epoch of the subgraph's data loader."""
        for node in topological(self.subgraphs[self._subgraph_name(subgraph)]):
            if node.kind == "data" and subgraph in node.loaders:
                return len(node.loaders[subgraph])
        raise GraphError(f"Executor: subgraph {subgraph!r} reads no data loader")

    # ------------------------------------------------------------------ training state

    def state_dict(self) -> dict[str, Any]:
        """The training state, as plain data (``graph._state``): parameters, optimizer variables, update step
        counts and the data loaders' positions and random generators. A checkpoint saves it; a run that loads
        it continues as the uninterrupted run would."""
        from ._state import state_dict

        return state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Load a ``state_dict()`` (values copied into the nodes' arrays); ``strict``: the names must match."""
        from ._state import load_state_dict

        load_state_dict(self, state, strict)

    # ------------------------------------------------------------------ reporting

    def memory(self, subgraph: str | None = None, feed: Mapping[Any, Any] | None = None) -> MemoryReport:
        """Peak bytes of the planned program against keeping every value."""
        return self.plan(subgraph, feed).memory()

    def explain(self, subgraph: str | None = None, feed: Mapping[Any, Any] | None = None) -> PlanText:
        """The plan as a table: node, op, backend:algorithm, device, output shape, bytes; then the
        transfers between memory spaces and the memory report."""
        return explain_program(self.plan(subgraph, feed))


def _shaped(value: Any) -> Shaped:
    if isinstance(value, Shaped):
        return value
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        array = np.asarray(value)
        shape, dtype = array.shape, array.dtype
    return Shaped(tuple(int(s) for s in shape), str(np.dtype(dtype)))


def space_of(value: Any) -> MemorySpace:
    """The memory space of a fed array: host for numpy arrays (and what numpy converts), else the
    available backend's whose array type it is."""
    for backend in get_registry().backends.values():
        space = backend.memory
        if space.is_host or backend.availability() is not True:
            continue
        if holds(space, value):
            return space
    return HOST


def _lookup(feed: Mapping[Any, Any], node: Node) -> Any:
    for key in (node, node.name):
        try:
            if key in feed:
                return feed[key]
        except TypeError:
            continue
    return None


def _input_shape(node: Node) -> Shape | None:
    first = node.inputs[0] if node.inputs else None
    return None if first is None or not first.dtype else first.shape


def _serves(subject: Subject, request: str) -> None:
    """Refuse a request (not plain "default" or "auto": planning reports those) that cannot serve the
    node, where its inputs' shapes are known when it is built (not in an imported model's graph)."""
    node = subject.target
    if request in ("default", "auto") or node.dynamic is not None or node.needs:
        return
    if any(i is not None and not i.dtype for i in node.inputs):
        return
    shapes = [None if i is None else i.shape for i in node.inputs]
    select(get_registry(), str(node.op), shapes, [None if i is None else i.dtype for i in node.inputs], node.attrs, request, None)
