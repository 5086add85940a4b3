"""What plugins did to earlier processes: markers of plugin code in progress, and the faults left behind.

Before a plugin is imported or registered, and before a backend's availability probe runs, a marker
file naming the plugin, the stage and this process is written to ``<state>/running/``; it is removed
when the stage ends, however it ends. A marker whose process has gone (same host, pid no longer
running) is a stage that never finished: the plugin crashed or ended the process. Discovery turns
such markers into fault records in ``<state>/faults/``, and a plugin (or backend) with a fault record
is skipped, with the record's story as its reason, until the user retries it or installs another
version. A stage that timed out is recorded the same way at once. Markers of live processes
(concurrent commands, pytest-xdist workers) are left alone. Without a writable state directory
nothing is remembered and nothing fails.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from ._settings import ENV_RETRY, ENV_TIMEOUT, normalise

STAGES = {"import": "import", "registration": "registration (algoswap_register)", "probe": "availability probe"}
_sequence = itertools.count()


@dataclass(frozen=True)
class Fault:
    """A stage of a plugin that did not finish: ``outcome`` is "crashed" or "timed out"."""

    plugin: str
    distribution: str
    version: str
    stage: str
    outcome: str
    pid: int
    host: str
    when: str
    backend: str = ""
    seconds: float = 0.0
    ended: str = ""  # a check's (``_quarantine``): how the checking process ended ("SIGSEGV", "exit status 3")

    @property
    def key(self) -> str:
        return _key(self.plugin, self.backend)

    def story(self) -> str:
        """What happened and how to retry, as the reason a listing shows."""
        stage = STAGES.get(self.stage, self.stage) + (f" of backend {self.backend!r}" if self.backend else "")
        checker = f"the process that checked it before loading it (process {self.pid}"
        if self.outcome == "timed out":
            where = f"{checker})" if self.ended else f"process {self.pid}"
            what = f"its {stage} did not finish within {self.seconds:g} s ({ENV_TIMEOUT}) in {where}"
        elif self.ended:
            what = f"its {stage} ended {checker}: {self.ended})"
        else:
            what = f"process {self.pid} ended during its {stage} (the plugin crashed or exited the process)"
        return (f"{what} on {self.when}; skipped until retried: `algoswap retry {self.plugin}` "
                f"or {ENV_RETRY}={self.plugin}")

    def matches(self, names: set[str]) -> bool:
        """Whether any of ``names`` (normalised; "all" or "*" for every fault) names this fault."""
        return bool(names & {"all", "*", normalise(self.plugin), normalise(self.distribution), normalise(self.backend)})


def _process_alive(pid: int, start: str) -> bool:
    """Whether ``pid`` runs (a zombie does not) and, where /proc says, started when the marker says."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        fields = []
    if len(fields) > 19:
        return fields[0] not in ("Z", "X") and (not start or fields[19] == start)
    if os.name == "nt":  # os.kill would end the process there: never judge another's
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, but belongs to someone else
        return True
    return True


def _own_start() -> str:
    try:
        return Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class FaultLog:
    """The state directory: markers of stages in progress (``running/``) and faults (``faults/``)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.host = _host_name()
        self._start = _own_start()

    def begin(self, plugin: str, distribution: str, version: str, stage: str, backend: str = "") -> Path | None:
        """Write the marker of a stage about to run; None if the state directory is not writable."""
        content = {"plugin": plugin, "distribution": distribution, "version": version, "stage": stage,
                   "backend": backend, "pid": os.getpid(), "start": self._start, "host": self.host,
                   "when": _now()}
        name = f"{self.host}-{os.getpid()}-{next(_sequence)}.json"
        return self._write("running", name, content)

    def end(self, marker: Path | None) -> None:
        if marker is not None:
            _remove(marker)

    def timed_out(self, marker: Path | None, plugin: str, distribution: str, version: str, stage: str, backend: str,
                  seconds: float) -> Fault:
        """A stage that did not finish in time: its marker becomes a fault record now."""
        self.end(marker)
        fault = Fault(plugin, distribution, version, stage, "timed out", os.getpid(), self.host, _now(), backend, seconds)
        if marker is not None:
            self.record(fault)
        return fault

    def collect(self) -> None:
        """Turn the markers of processes that are gone into fault records."""
        for marker in self._files("running"):
            content = _read(marker)
            pid = content.get("pid") if content is not None else None
            if content is None or content.get("host") != self.host or not isinstance(pid, int):
                continue  # another host's, or not a marker of ours
            if not _process_alive(pid, str(content.get("start", ""))):
                self.record(_crash(content))
                _remove(marker)

    def record(self, fault: Fault) -> None:
        self._write("faults", _file_name(fault.key), asdict(fault))

    def fault(self, plugin: str, backend: str = "") -> Fault | None:
        if self.directory is None:
            return None
        return _as_fault(_read(self.directory / "faults" / _file_name(_key(plugin, backend))))

    def forget(self, fault: Fault) -> None:
        if self.directory is not None:
            _remove(self.directory / "faults" / _file_name(fault.key))

    def faults(self) -> list[Fault]:
        faults = (_as_fault(_read(path)) for path in self._files("faults"))
        return [fault for fault in faults if fault is not None]

    def clear(self, names: set[str]) -> list[Fault]:
        """Forget the faults ``names`` match (see ``Fault.matches``); returns them."""
        cleared = [fault for fault in self.faults() if fault.matches(names)]
        for fault in cleared:
            self.forget(fault)
        return cleared

    def _files(self, folder: str) -> Iterator[Path]:
        if self.directory is None:
            return iter(())
        try:
            return iter(sorted((self.directory / folder).glob("*.json")))
        except OSError:
            return iter(())

    def _write(self, folder: str, name: str, content: dict[str, Any]) -> Path | None:
        if self.directory is None:
            return None
        path = self.directory / folder / name
        return path if write_json(path, content) else None


def write_json(path: Path, content: Any) -> bool:
    """Write ``content`` to ``path`` whole or not at all: readers, and other processes writing it at the
    same time, never see half a file. False if the directory is not writable."""
    partial = path.with_name(f".{path.name}.{os.getpid()}-{next(_sequence)}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(content))
        os.replace(partial, path)
    except OSError:
        _remove(partial)
        return False
    return True


def _crash(content: dict[str, Any]) -> Fault:
    text = {k: str(content.get(k, "")) for k in ("plugin", "distribution", "version", "stage", "host", "when", "backend")}
    return Fault(text["plugin"], text["distribution"], text["version"], text["stage"], "crashed", int(content["pid"]),
                 text["host"], text["when"], text["backend"])


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _as_fault(content: dict[str, Any] | None) -> Fault | None:
    try:
        return Fault(**content) if content is not None else None
    except TypeError:  # written by another version of algoswap
        return None


def _key(plugin: str, backend: str) -> str:
    return f"{plugin}:{backend}" if backend else plugin


def _file_name(key: str) -> str:
    """The key, with every character a file name might not hold %-escaped (so names never collide)."""
    return re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"%{ord(m.group()):02X}", key) + ".json"


def _host_name() -> str:
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket  # Windows; socket costs milliseconds to import, os.uname nothing

    return socket.gethostname()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
