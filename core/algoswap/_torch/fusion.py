"""Fusion in ``swap_backend`` models: a conv2d with the add and/or relu that alone consume its output
run as one ``conv2d_fused`` call (oneDNN applies them as post-ops, in the same pass over memory).

``fuse(steps, output)`` groups such chains into ``FusedStep``s. The decision is made per input shape,
when the conv2d's implementation is selected (honouring its request): the chain is fused only if
that same backend and algorithm has a ``conv2d_fused`` implementation serving the call; otherwise
its steps run one by one, and ``explain`` says why. An add or relu with a request of its own (not
"default" or "auto") is never taken into a chain: it runs as asked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .._cache import LRUCache
from .._core_caches import MODEL_STEPS
from .._errors import AlgoswapError
from .._global import get_registry
from .._runner import Runner
from .._select import Selection, select
from .._trace import record
from .plan import OpStep, Step, array_key, invoke, moves, slots_in

FUSABLE_REQUESTS = ("default", "auto")


@dataclass
class FusedStep:
    """conv2d → [add residual] → [relu] as one ``conv2d_fused`` call where the conv2d's implementation can."""

    conv: OpStep
    add: OpStep | None
    relu: OpStep | None
    residual: int | None  # the add's other operand
    free: tuple[int, ...] = ()
    last_key: tuple[Any, ...] | None = None
    _cache: LRUCache[Runner | str] = field(default_factory=lambda: LRUCache(MODEL_STEPS), repr=False)

    kind = "fused"

    @property
    def members(self) -> list[OpStep]:
        return [s for s in (self.conv, self.add, self.relu) if s is not None]

    @property
    def name(self) -> str:
        return self.conv.name

    @property
    def output(self) -> int:
        return self.members[-1].output

    @property
    def label(self) -> str:
        """"conv2d+add+relu" and the like."""
        return "+".join(s.op for s in self.members)

    def reads(self) -> set[int]:
        return self.conv.reads() | ({self.residual} if self.residual is not None else set())

    def run(self, values: list[Any]) -> None:
        arrays = [None if i is None else values[i] for i in self.conv.inputs]
        residual = None if self.residual is None else values[self.residual]
        key = array_key([*arrays, residual])
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache.put(key, self._decide(arrays, residual))
        self.last_key = key
        if isinstance(entry, str):  # not fused: the steps one by one, intermediates dropped at once
            for step in self.members:
                step.run(values)
            for step in self.members[:-1]:
                values[step.output] = None
            return
        record(entry.selection)
        values[self.output] = invoke(entry, [*arrays, residual], self.conv.params)

    def _decide(self, arrays: list[Any], residual: Any) -> Runner | str:
        """The conv2d_fused implementation twin of the conv2d's, or why the chain runs unfused."""
        chosen = self.conv.entry(arrays, self.conv.attrs).selection
        shapes = [None if a is None else a.shape for a in [*arrays, residual]]
        dtypes = [None if a is None else str(a.dtype) for a in [*arrays, residual]]
        attrs = {**self.conv.attrs, "activation": "relu" if self.relu is not None else "none"}
        try:  # the backend is named: its memory is where the conv2d runs
            fused = select(get_registry(), "conv2d_fused", shapes, dtypes, attrs, chosen.impl.qualified, None)
        except AlgoswapError as exc:
            return f"not fused: {chosen.impl.qualified} has no conv2d_fused for this call ({str(exc).splitlines()[0]})"
        return Runner(fused)

    @property
    def last_selection(self) -> Selection | None:
        """The conv2d_fused selection of the latest call, None if that call ran unfused (or none ran)."""
        entry = self._cache.get(self.last_key) if self.last_key is not None else None
        return None if entry is None or isinstance(entry, str) else entry.selection

    def transfers(self) -> str:
        """Where the latest fused call's activations (weights aside) had to move from."""
        selection = self.last_selection
        if selection is None or self.last_key is None:
            return ""
        return moves(self.last_key, self.conv.params, selection.backend.memory.name)

    @property
    def unfused_reason(self) -> str | None:
        entry = self._cache.get(self.last_key) if self.last_key is not None else None
        return entry if isinstance(entry, str) else None

    def preselect(self) -> None:
        """Decide for the shapes the members were preselected with (conversion with a sample input)."""
        add_shapes = None if self.add is None else self.add.last_shapes
        if self.conv.last_shapes is None or (self.add is not None and add_shapes is None):
            return
        conv_shapes = list(self.conv.last_shapes)
        residual = None
        if self.add is not None and add_shapes is not None:
            residual = add_shapes[self.add.inputs.index(self.residual)]
        self.last_key = tuple([*conv_shapes, residual])
        arrays = [None if k is None else _Shaped(k[0], k[1]) for k in conv_shapes]
        self._cache.put(self.last_key, self._decide(arrays, None if residual is None else _Shaped(residual[0], residual[1])))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_cache=None, last_key=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _cache=LRUCache(MODEL_STEPS))


@dataclass(frozen=True)
class _Shaped:
    """Shape and dtype standing in for an array where only those are known (preselection)."""

    shape: tuple[int, ...]
    dtype: Any


def fuse(steps: list[Any], output: Any) -> list[Any]:
    """``steps`` with each conv2d → [add] → [relu] chain, whose intermediate values have no other reader,
    replaced by one FusedStep at the position of its last member."""
    readers = Counter(slot for step in steps for slot in step.reads())
    for slot in slots_in(output):
        readers[slot] += 1
    consumer: dict[int, Any] = {}
    for step in steps:
        for slot in step.reads():
            consumer[slot] = step
    fused: dict[int, FusedStep] = {}  # id of the last member -> its FusedStep
    absorbed: set[int] = set()
    for step in steps:
        if isinstance(step, OpStep) and step.op == "conv2d" and not step.dynamic:
            group = _chain(step, readers, consumer)
            if group is not None and not any(id(s) in absorbed for s in group.members):  # an add joins one chain
                fused[id(group.members[-1])] = group
                absorbed.update(id(s) for s in group.members)
    result = []
    for step in steps:
        if id(step) in fused:
            result.append(fused[id(step)])
        elif id(step) not in absorbed:
            result.append(step)
    return result


def _fusable(request: str, conv_request: str) -> bool:
    """Whether a member asked for ``request`` may run inside the conv2d's call: it asked for nothing in
    particular, or for the default of the backend the conv2d asked for ("sycl:default" for a whole model)."""
    if request in FUSABLE_REQUESTS:
        return True
    backend, _, algorithm = request.partition(":")
    return algorithm == "default" and conv_request.partition(":")[0] == backend


def _sole_consumer(step: OpStep, readers: Counter[int], consumer: dict[int, Any], op: str, conv: OpStep) -> OpStep | None:
    nxt = consumer.get(step.output)
    if readers[step.output] != 1 or not isinstance(nxt, OpStep) or nxt.op != op or nxt.dynamic:
        return None
    if not _fusable(nxt.request, conv.request):  # asked for an implementation of its own: it runs as asked
        return None
    return nxt


def _chain(conv: OpStep, readers: Counter[int], consumer: dict[int, Any]) -> FusedStep | None:
    add = _sole_consumer(conv, readers, consumer, "add", conv)
    residual = None
    if add is not None:
        others = [i for i in add.inputs if i != conv.output]
        if len(others) != 1 or others[0] is None:
            add = None  # x + x, or an odd add
        else:
            residual = others[0]
    relu = _sole_consumer(add or conv, readers, consumer, "relu", conv)
    if add is None and relu is None:
        return None
    return FusedStep(conv, add, relu, residual)


AnyStep = Step | FusedStep
