"""Programs captured as device graphs (CUDA graphs) and replayed: the whole program launched at once,
with none of the per-step host work (selection look-ups, argument checks, kernel launches one by one).

A memory space that can record the work queued on its device declares ``capture`` (see
``MemorySpace``): ``capture(run, inputs)`` calls ``run`` (the program's steps on ``inputs``, returning
its outputs) while recording, and returns a replay: a function of new inputs of the same shapes,
dtypes and memory space that gives the outputs ``run`` would, each a new array of the caller's (a
later replay never overwrites them). It raises where recording fails (a step that reads a device
value on the host, say): the program then runs eagerly from then on, and the reason is kept. A
replay may have ``stale()``, the reason it no longer matches the process's settings ("" while it
does): it is then dropped and captured again.

Per program (one input signature: shapes, dtypes, memory spaces), the first run is eager: it warms
up what is made on first use (plans, compiled kernels, cuDNN's timed search), none of which may
happen while recording. The second run captures, then replays; later runs replay. A program is
captured only where every step runs in one memory space that captures, with its inputs already
there (a transfer, a host step, a PyTorch fallback or per-run attributes keep it eager, with the
reason). ``Executor(capture=...)`` switches it: True, False, or None to follow the environment
variable ALGOSWAP_CAPTURE (on unless "0"). At most ``graph_captures`` programs per executor are
kept captured (``algoswap.set_cache_limit``), the least recently used dropped first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .._cache import LRUCache
from .._core_caches import GRAPH_CAPTURES
from .._records import MemorySpace
from .._ref import resolve_ref
from ._node import Node
from ._program import Program, Step

ENV_CAPTURE = "ALGOSWAP_CAPTURE"
Replay = Callable[[Sequence[Any]], list[Any]]
WARMING = "the first call with these inputs runs eagerly (it warms up); the next one captures"


@dataclass(frozen=True)
class CaptureReport:
    """How the latest run went: "replay" (a captured graph ran), "capture" (captured at this run, then
    replayed) or "eager" (step by step), with the reason it was not captured."""

    mode: str
    reason: str = ""
    space: str = ""

    def __str__(self) -> str:
        if self.mode == "replay":
            return f"replayed the {self.space} graph captured for these inputs"
        if self.mode == "capture":
            return f"captured a {self.space} graph at this call and replayed it (later calls with these inputs replay it)"
        return f"eager: {self.reason}"


@dataclass
class _Entry:
    """What is known of one program: why it is not captured, or its replay once captured."""

    program: Program
    space: MemorySpace | None
    refused: str = ""
    warm: bool = False
    replay: Replay | None = None


def capture_on_by_default() -> bool:
    """ALGOSWAP_CAPTURE: capture unless it is "0" (or "false", "off", "no")."""
    return os.environ.get(ENV_CAPTURE, "1").strip().lower() not in ("0", "false", "off", "no")


class Captures:
    """One executor's captured programs and its switch (``enabled``: True, False or None, which
    follows ALGOSWAP_CAPTURE); ``last`` reports the latest run."""

    def __init__(self, enabled: bool | None = None) -> None:
        self._entries: LRUCache[_Entry] = LRUCache(GRAPH_CAPTURES)
        self.last: CaptureReport | None = None
        self._enabled: bool | None = None
        self.enabled = enabled

    @property
    def enabled(self) -> bool | None:
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool | None) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"capture must be True, False or None (follow {ENV_CAPTURE}); got {value!r}")
        self._enabled = value
        if not self.active():
            self.clear()

    def active(self) -> bool:
        return capture_on_by_default() if self._enabled is None else self._enabled

    def clear(self) -> None:
        """Drop every captured graph (and the memory it holds)."""
        self._entries.clear()

    def __len__(self) -> int:
        """How many programs are known here (captured, warming up or refused)."""
        return len(self._entries)

    def run(self, program: Program, values: list[Any]) -> list[Any]:
        """The program's outputs for ``values`` (its sources filled in): replayed, captured or eager."""
        if not self.active():
            switch = "Executor(capture=False) / Model.capture = False" if self._enabled is False else f"{ENV_CAPTURE}=0"
            return self._eager(program, values, f"capture is off ({switch})")
        entry = self._entry(program)
        if entry.refused:
            return self._eager(program, values, entry.refused)
        assert entry.space is not None
        slots = [slot for slot, node in program.sources if node.kind == "placeholder"]
        inputs = [values[slot] for slot in slots]
        if entry.replay is not None and _current(entry.replay):
            self.last = CaptureReport("replay", space=entry.space.name)
            return entry.replay(inputs)
        if entry.replay is not None or not entry.warm:
            why = _stale(entry.replay) if entry.replay is not None else WARMING
            entry.replay, entry.warm = None, True
            return self._eager(program, values, why)
        return self._capture(entry, values, slots, inputs)

    def _entry(self, program: Program) -> _Entry:
        entry: _Entry | None = self._entries.get(id(program))
        if entry is None or entry.program is not program:
            space, refused = capturing_space(program)
            entry = self._entries.put(id(program), _Entry(program, space, refused))
        return entry

    def _capture(self, entry: _Entry, values: list[Any], slots: list[int], inputs: list[Any]) -> list[Any]:
        program, space = entry.program, entry.space
        assert space is not None and space.capture is not None

        def run(fed: Sequence[Any]) -> list[Any]:
            return execute(program, _with(values, slots, fed))

        try:
            entry.replay = resolve_ref(space.capture)(run, inputs)
        except Exception as exc:  # noqa: BLE001 - any failure to record is a reason to run eagerly
            entry.refused = f"capture failed, so these inputs run eagerly: {type(exc).__name__}: {exc}"
            return self._eager(program, values, entry.refused)
        self.last = CaptureReport("capture", space=space.name)
        return entry.replay(inputs)

    def _eager(self, program: Program, values: list[Any], reason: str) -> list[Any]:
        self.last = CaptureReport("eager", reason)
        return execute(program, values)


def execute(program: Program, values: list[Any]) -> list[Any]:
    """Run the program's steps on ``values`` (its sources filled in); its outputs."""
    program.run(values)
    return [None if slot is None else values[slot] for slot in program.output_slots]


def _with(values: list[Any], slots: list[int], fed: Sequence[Any]) -> list[Any]:
    filled = list(values)
    for slot, value in zip(slots, fed):
        filled[slot] = value
    return filled


def _stale(replay: Replay) -> str:
    check = getattr(replay, "stale", None)
    why = check() if check is not None else ""
    return f"the graph captured for these inputs no longer applies ({why}): captured again at the next call"


def _current(replay: Replay) -> bool:
    check = getattr(replay, "stale", None)
    return check is None or not check()


def capturing_space(program: Program) -> tuple[MemorySpace | None, str]:
    """The memory space that captures the program, or None and why it cannot be captured."""
    sources = {slot: node for slot, node in program.sources}
    for slot, node in program.sources:
        if node.kind == "data":
            return None, f"it reads data node {node.name!r} from a DataLoader at every run"
        if slot in program.kept:
            return None, f"it updates {node.name!r} in place in {program.kept[slot].name} memory (training)"
    if program.steps and all(step.memory.is_host for step in program.steps):
        return None, "it runs in host memory (a device's memory space captures programs: CUDA's does)"
    spaces: dict[str, MemorySpace] = {}
    for step in program.steps:
        why = _step_refusal(step, sources)
        if why:
            return None, why
        spaces.setdefault(step.memory.name, step.memory)
    if len(spaces) != 1:
        return None, (f"its steps run in {' and '.join(sorted(spaces))} memory" if spaces else "it runs no step")
    space = next(iter(spaces.values()))
    if space.capture is None:
        return None, f"the {space.name} memory space does not capture programs"
    return space, ""


def _step_refusal(step: Step, sources: dict[int, Node]) -> str:
    """Why this step keeps its program from being captured ("" if it does not)."""
    if step.kind == "torch":
        return f"node {step.name!r} runs in PyTorch"
    if step.is_transfer:
        first = step.inputs[0] if step.inputs else None
        node = None if first is None else sources.get(first)
        if node is not None and node.kind == "placeholder" and not step.memory.is_host:
            return (f"input {node.name!r} arrives in another memory space and moves to {step.memory.name} at every call "
                    f"(pass it in {step.memory.name} memory to capture)")
        return f"{step.name} moves between memory spaces at every call ({step.note})"
    if step.memory.is_host:
        where = f"{step.backend}:{step.algorithm}" if step.backend else step.kind
        return f"node {step.name!r} runs in host memory ({where})"
    if step.node is not None and step.node.dynamic is not None:
        return f"node {step.name!r} takes attributes computed at every run"
    return ""
