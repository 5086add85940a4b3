"""Supervision of one plugin's code: time-limited (``_guard``), remembered if it never finishes
(``_faults``), and the per-process health of the backends it declared."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from ._faults import Fault, FaultLog
from ._guard import Frame, Guard, TimedOut, named_frame
from ._log import backend_out
from ._names import ModuleNames
from ._ref import Ref

if TYPE_CHECKING:
    from ._records import Available, BackendRecord


def owner_label(plugin: str, distribution: str, version: str) -> str:
    """Who a plugin's records come from, in reports: its distribution and version (or its name)."""
    return f"{distribution} {version}".strip() if distribution else f"plugin {plugin!r}"


def reason_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def unresolvable(what: str, ref: str, owner: str, exc: BaseException) -> str:
    """Why a lazy ``"module:attribute"`` reference is of no use, naming it and its distribution."""
    return f"cannot import its {what} {ref!r} ({owner}): {reason_of(exc)}"


class Supervisor:
    """Runs one plugin's code under its guard; if the plugin is installed (has a distribution), each
    stage is marked in the fault log while it runs, and remembered if it times out. ``checked``: the
    faults of the probes that ended or hung the process that checked the plugin (``_quarantine``)."""

    def __init__(self, plugin: str, distribution: str, version: str, guard: Guard, faults: FaultLog,
                 retry: set[str], checked: Iterable[Fault] = ()) -> None:
        self.plugin, self.distribution, self.version = plugin, distribution, version
        self.guard = guard
        self.faults = faults
        self.retry = retry
        self.checked = {fault.backend: fault for fault in checked}

    @property
    def owner(self) -> str:
        return owner_label(self.plugin, self.distribution, self.version)

    def frame(self, what: str) -> Frame:
        """A frame naming this plugin and what it runs, for faulthandler's dump of a crash."""
        return named_frame(f"<algoswap plugin {self.plugin!r} ({self.owner}): {what}>")

    def previous_fault(self, backend: str = "") -> Fault | None:
        """The fault an earlier stage (or the plugin's check) left, unless retried or another version is installed now."""
        if backend in self.checked:
            return self.checked[backend]
        if not self.distribution:
            return None
        fault = self.faults.fault(self.plugin, backend)
        if fault is None:
            return None
        if (fault.distribution, fault.version) != (self.distribution, self.version) or fault.matches(self.retry):
            self.faults.forget(fault)
            return None
        return fault

    def run(self, stage: str, fn: Callable[..., Any], *args: Any, backend: str = "") -> Any:
        """``fn(*args)`` as ``stage`` ("import", "registration", "probe"); TimedOut carries the fault's story."""
        marker = self.faults.begin(self.plugin, self.distribution, self.version, stage, backend) if self.distribution else None
        try:
            return self.guard.run(self.frame(f"{stage} of backend {backend!r}" if backend else stage), fn, *args)
        except TimedOut as exc:
            fault = self.faults.timed_out(marker, self.plugin, self.distribution, self.version, stage, backend, exc.seconds)
            marker = None
            exc.story = fault.story()
            raise
        finally:
            self.faults.end(marker)


class BackendHealth:
    """What this process knows of one backend: whether its probe said it can run here, or why it is
    out of selection (status "available", "unavailable", "timed out" or "crashed")."""

    def __init__(self) -> None:
        self.supervisor: Supervisor | None = None
        self.answer: bool | str | None = None
        self.status = "unknown"
        self.device = ""
        self.names = ModuleNames()  # what the modules of its references bind, learnt without importing them
        self._lock = threading.Lock()

    def settle(self, backend: "BackendRecord") -> bool | str:
        """Run the probe (once, under supervision) unless an answer is known; return the answer."""
        with self._lock:
            if self.answer is None:
                self.status, self.answer = self._probe(backend)
                if self.status in ("timed out", "crashed"):
                    backend_out(backend.name, self.status, str(self.answer))
            return self.answer

    def take_out(self, backend: str, status: str, reason: str) -> None:
        """Take ``backend`` (this health's) out of selection for the rest of the process."""
        with self._lock:
            self.status, self.answer = status, reason
        backend_out(backend, status, reason)

    def _probe(self, backend: "BackendRecord") -> tuple[str, bool | str]:
        status, answer = self._ask_probe(backend)
        unusable = self.unresolvable_memory(backend) if status == "available" else ""
        return ("unavailable", unusable) if unusable else (status, answer)

    def _ask_probe(self, backend: "BackendRecord") -> tuple[str, bool | str]:
        if backend.probe is None:
            return "available", True
        supervisor = self.supervisor
        fault = supervisor.previous_fault(backend.name) if supervisor is not None else None
        if fault is not None:
            return fault.outcome, f"{fault.outcome}: {fault.story()}"
        try:
            answer: Literal[True] | str | Available = (
                supervisor.run("probe", _ask, backend, backend=backend.name) if supervisor else _ask(backend))
        except TimedOut as exc:
            return "timed out", f"timed out: {exc.story}"
        if isinstance(answer, str):
            return "unavailable", answer
        self.device = "" if answer is True else answer.device
        return "available", True

    def unresolvable_memory(self, backend: "BackendRecord") -> str:
        """Why the functions that move the backend's arrays cannot be imported ("" if they may be)."""
        memory = backend.memory
        for what in ("to_host", "from_host", "from_dlpack", "capture"):
            ref = getattr(memory, what)
            if not isinstance(ref, (str, Ref)):
                continue
            target = ref if isinstance(ref, str) else ref.target
            missing = self.names.problem(target)
            if missing is not None:
                return unresolvable(f"memory space's {what}", target, backend.owner, missing)
        return ""


def _ask(backend: "BackendRecord") -> "Literal[True] | str | Available":
    """The probe's answer; any failure but KeyboardInterrupt is a reason, never a crash."""
    from ._records import Available
    from ._ref import resolve_ref

    try:
        probe = resolve_ref(backend.probe)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return unresolvable("availability probe", str(backend.probe), backend.owner, exc)
    try:
        answer = probe()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a missing driver is a reason, never a traceback
        return f"availability probe raised {reason_of(exc)}"
    if answer is True or isinstance(answer, Available):
        return answer
    return str(answer) if answer else "availability probe answered False"
