"""New or changed plugins are imported first in a child process, so that one that ends the process
(``os._exit``, a segfault) or hangs at import, at registration or in a backend's availability probe
ends or hangs that child, never a command.

An installed plugin (``Install``: its entry point, its distribution's name, version and dist-info
directory, that directory's inode and change time, which a reinstall renews, where its top-level
module is found and that file's mtime, the interpreter and algoswap's version) is imported
in-process only once a check has found that it does not end or hang the process. Unchecked ones (new,
upgraded, reinstalled, or named by ``ALGOSWAP_RETRY_PLUGINS`` after a failed check) are checked
together: one child (``serve``) imports and registers them one after the other, as discovery does,
then asks each backend a plugin registered whether it is available, as a command does, and tells the
parent through a pipe which plugin, stage and backend it is in. If the child ends, or a stage does not
finish within ``ALGOSWAP_PLUGIN_TIMEOUT``, the plugin (or the backend, in its probe) in that stage gets
a ``Fault`` and the rest are checked in a new child. The probes' answers are not kept: availability
depends on the command's environment (devices, drivers, variables), so each command asks again; only
a probe that ends or hangs the process is remembered. The verdicts are kept in
``<cache>/plugin-checks-2.json`` (``ALGOSWAP_CACHE_DIR``), one record for every process of the machine:
a plugin that passed is imported in-process from then on (an exception it raises is caught there too,
and said afresh), one that failed is skipped with the fault's story until it is reinstalled or
retried; so is a backend whose probe failed, while the plugin's other backends are used. Without a
writable record every command checks again. Where no child can be started (a frozen application),
plugins are loaded unchecked, as the fault log (``_faults``) alone then protects.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable

from ._faults import Fault, FaultLog, _host_name, _now, write_json
from ._log import plugins_checked, warn_once
from ._settings import normalise
from ._version import __version__

if TYPE_CHECKING:
    from ._records import PluginRecord

RECORD = "plugin-checks-2.json"  # the number changes with the record's format: versions never read each other's
STARTUP_SECONDS = 60.0  # for the child to start and import algoswap, before any plugin code runs
OUTPUT_CHARS = 4000  # of what the plugin printed on stderr before it ended the child: faulthandler's dump
_serving = False  # whether this process is a child that checks plugins
_CHILD = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"  # Ctrl-C interrupts the parent, which ends the child: no verdict
    "sys.path[:] = [p for p in sys.path if p]\n"  # the working directory's modules may not stand in for json
    "import json\n"
    "request = json.loads(sys.stdin.readline())\n"
    "sys.path[:] = request['path']\n"
    "from algoswap._quarantine import serve\n"
    "serve(request['plugins'], request['skip'])\n"
)


@dataclass(frozen=True)
class Install:
    """One entry point of one installed distribution, as a check's verdict holds for it."""

    name: str
    value: str
    distribution: str
    version: str
    path: str  # the distribution's dist-info directory
    stamp: str  # that directory's inode and change time: new on every install
    module: str  # the file of the entry point's top-level module, where it is found now
    edited: int  # that file's mtime
    python: str = sys.executable
    core: str = __version__

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Checkouts of one plugin that share an install (on PYTHONPATH in front of it) each have their verdict."""
        return self.python, self.path, self.name, self.module

    def matches(self, names: set[str]) -> bool:
        return bool(names & {"all", "*", normalise(self.name), normalise(self.distribution)})

    def present(self) -> bool:
        """Whether its dist-info directory and module file (where known) are still there."""
        return all(os.path.exists(file) for file in (self.path, self.module) if file)


@dataclass(frozen=True)
class Verdict:
    """A check's outcome: ``fault`` None if the plugin imported and registered (or raised) and the child went
    on; ``probes``: the faults of its backends whose availability probe ended or hung the child."""

    install: Install
    fault: Fault | None = None
    output: str = ""  # the child's stderr from the start of each stage it ended in
    probes: tuple[Fault, ...] = ()

    @property
    def faults(self) -> tuple[Fault, ...]:
        return (self.fault, *self.probes) if self.fault is not None else self.probes

    def failed(self, probe: Fault, output: str) -> "Verdict":
        """This verdict, and a probe that ended or hung the child."""
        return Verdict(self.install, self.fault, self.output + output, (*self.probes, probe))


def install_of(entry_point: Any, record: "PluginRecord") -> Install | None:
    """The install of an entry point (``record``: its distribution's name and version, as discovery read
    them); None for an entry point of no distribution: it cannot be remembered."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None
    path = getattr(dist, "_path", None)  # a PathDistribution's directory; importlib.metadata has no public name for it
    try:
        stat = os.stat(path)  # type: ignore[arg-type]
        stamp = f"{stat.st_ino}-{stat.st_ctime_ns}"
    except (OSError, TypeError, ValueError):
        stamp = ""
    module, edited = _module_file(entry_point.value)
    return Install(entry_point.name, entry_point.value, record.distribution, record.version, str(path or ""), stamp,
                   module, edited)


def _module_file(value: str) -> tuple[str, int]:
    """Where the top-level module of an entry point's value is found now (without running it), and that
    file's mtime: a checkout put on PYTHONPATH in front of the install, or an edit of that file (a
    single-file plugin's whole code), is another install. Its submodules are not looked at."""
    top = value.split(":")[0].split(".")[0].strip()
    try:
        spec = importlib.util.find_spec(top)
        origin = spec.origin if spec is not None and spec.has_location else None
        return (origin, os.stat(origin).st_mtime_ns) if origin else ("", 0)
    except (ImportError, ValueError, OSError):
        return "", 0


class CheckRecord:
    """The verdicts of the checks made on this machine, in one JSON file shared by every process."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / RECORD if directory is not None else None

    def read(self) -> dict[tuple[str, str, str, str], Verdict]:
        if self.path is None:
            return {}
        try:
            text = self.path.read_text()
        except OSError:  # none yet
            return {}
        try:
            entries = json.loads(text)["verdicts"]
            verdicts = [_verdict(entry) for entry in entries]
        except (ValueError, KeyError, TypeError) as exc:
            warn_once(("check record", str(self.path)), "ignoring the unreadable record of plugin checks %s (%s): "
                      "it is written again", self.path, exc)
            return {}
        return {verdict.install.key: verdict for verdict in verdicts}

    def write(self, verdicts: Iterable[Verdict]) -> bool:
        """Add ``verdicts`` to what the record holds now, less the installs (and checkouts) that are gone."""
        if self.path is None:
            return False
        merged = {**self.read(), **{verdict.install.key: verdict for verdict in verdicts}}
        kept = [_entry(v) for v in merged.values() if v.install.present()]
        return write_json(self.path, {"verdicts": kept})

    def forget(self, names: set[str]) -> list[str]:
        """Forget the failed checks ``names`` match (entry point or distribution; "all"); returns their plugins."""
        held = self.read()
        gone = [v for v in held.values() if v.faults and (v.install.matches(names) or _any_matches(v.probes, names))]
        if gone and self.path is not None:
            write_json(self.path, {"verdicts": [_entry(v) for v in held.values() if v not in gone]})
        return [fault.key for verdict in gone for fault in verdict.faults]


def _any_matches(faults: Iterable[Fault], names: set[str]) -> bool:
    return any(fault.matches(names) for fault in faults)


def _entry(verdict: Verdict) -> dict[str, Any]:
    fault = verdict.fault and asdict(verdict.fault)
    return {"install": asdict(verdict.install), "fault": fault, "output": verdict.output,
            "probes": [asdict(probe) for probe in verdict.probes]}


def _verdict(entry: dict[str, Any]) -> Verdict:
    fault = entry["fault"]
    return Verdict(Install(**entry["install"]), Fault(**fault) if fault is not None else None, str(entry["output"]),
                   tuple(Fault(**probe) for probe in entry["probes"]))


class Quarantine:
    """Which of the plugins about to be loaded failed a check; the unchecked ones are checked first."""

    def __init__(self, directory: Path | None, timeout: float | None, retry: set[str]) -> None:
        self.record = CheckRecord(directory)
        self.timeout = timeout
        self.retry = retry

    def verdicts(self, plugins: list[tuple[Any, "PluginRecord"]]) -> list[Verdict | None]:
        """The verdict on each entry point (and its record) about to be loaded; None: unchecked, to be
        loaded as before (it has no distribution, or no child could check it)."""
        installs = [install_of(entry_point, record) for entry_point, record in plugins]
        held = self.record.read()
        unchecked = [i for i in installs if i is not None and self._unchecked(held.get(i.key), i)]
        fresh = self._check(unchecked) if unchecked and _can_start_a_child() else []
        held.update((verdict.install.key, verdict) for verdict in fresh)
        left = {i.key for i in unchecked} - {verdict.install.key for verdict in fresh}
        return [None if i is None or i.key in left else held[i.key] for i in installs]

    def _check(self, installs: list[Install]) -> list[Verdict]:
        started = time.perf_counter()
        fresh = check(installs, self.timeout)
        plugins_checked([i.name for i in installs], time.perf_counter() - started, self.record.path)
        if fresh and not self.record.write(fresh):
            warn_once(("check record not written",), "cannot write the record of plugin checks %s: the next "
                      "command checks the plugins again (ALGOSWAP_CACHE_DIR moves it)",
                      self.record.path or "(no cache directory)")
        return fresh

    def _unchecked(self, verdict: Verdict | None, install: Install) -> bool:
        if verdict is None or verdict.install != install:
            return True
        return _any_matches(verdict.faults, self.retry)


def _can_start_a_child() -> bool:
    """Not in a frozen application (its executable is no Python), nor in a child that checks plugins: one whose
    plugin starts a discovery (on a thread of its own) loads them there, unchecked, rather than in a grandchild."""
    return bool(sys.executable) and not getattr(sys, "frozen", False) and not _serving


def check(installs: list[Install], timeout: float | None) -> list[Verdict]:
    """Check ``installs`` in as few children as they allow: a new one after each that ends or hangs,
    which goes on with the plugin it ended in if that was in a probe (skipping the probes that failed)."""
    verdicts: list[Verdict] = []
    unfinished = Verdict(installs[0]) if installs else None
    while unfinished is not None:
        done, left = _check_in_one_child(installs[len(verdicts):], timeout, unfinished)
        if not done and left == unfinished:  # the child failed before any plugin's code ended it: the rest stay unchecked
            warn_once(("plugin check failed",), "could not check plugins in a child process (%s -c ...): "
                      "they are loaded unchecked", sys.executable)
            break
        verdicts += done
        unfinished = left
    return verdicts


def _check_in_one_child(installs: list[Install], timeout: float | None,
                        first: Verdict) -> tuple[list[Verdict], Verdict | None]:
    """The verdicts of the first of ``installs``, up to and with the one that ends or hangs the child, and
    the verdict so far on the one to check next (None: none left). ``first``: the verdict so far on the
    first, whose probes that failed in an earlier child are not run again."""
    import subprocess
    import tempfile

    path = [os.fsdecode(entry) for entry in sys.path if isinstance(entry, (str, bytes, os.PathLike))]
    request = json.dumps({"path": path, "plugins": [asdict(install) for install in installs],
                          "skip": [probe.backend for probe in first.probes]}) + "\n"
    try:
        with tempfile.TemporaryFile() as stderr:
            child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr)
            try:
                messages = _messages(child.stdout)
                child.stdin.write(request.encode())  # type: ignore[union-attr]
                child.stdin.close()  # type: ignore[union-attr]
                return _Follower(child, installs, timeout, stderr, first).follow(messages)
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
    except (OSError, RuntimeError):  # no temporary file, process or thread to be had; a child that did not read
        return [], first


def _messages(stream: IO[bytes] | None) -> "queue.SimpleQueue[dict[str, Any] | None]":
    """The child's messages, one JSON object a line, as they come; None when it closed the pipe."""
    lines: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()

    def read() -> None:
        assert stream is not None
        with stream:
            for line in stream:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # the child's report is its own; a line that is not one is no message
                if isinstance(message, dict):
                    lines.put(message)
        lines.put(None)

    threading.Thread(target=read, name="algoswap-plugin-check", daemon=True).start()
    return lines


class _Follower:
    """Follows one child through its checks: which plugin, stage and backend it is in, and how it ended."""

    def __init__(self, child: Any, installs: list[Install], timeout: float | None, stderr: IO[bytes],
                 first: Verdict) -> None:
        self.child, self.installs, self.timeout, self.stderr = child, installs, timeout, stderr
        self.verdicts: list[Verdict] = []
        self.current: Verdict | None = first  # the verdict so far on the plugin in check: installs[len(verdicts)]
        self.stage: tuple[str, str, int] | None = None  # the stage, the backend probed, where its output starts

    def follow(self, messages: "queue.SimpleQueue[dict[str, Any] | None]") -> tuple[list[Verdict], Verdict | None]:
        """The verdicts on the plugins checked to the end, and the verdict so far on the next one (None: none left)."""
        limit = None if self.timeout is None else max(self.timeout, STARTUP_SECONDS)
        while self.current is not None:
            try:
                message = messages.get(timeout=limit)
            except queue.Empty:
                return self._ended("timed out")
            if message is None:
                return self._ended("crashed")
            limit = self.timeout
            if message.get("index") != len(self.verdicts):
                continue  # not from the check in progress (a plugin that forked the child): no message
            if "stage" in message:
                self.stage = (str(message["stage"]), str(message.get("backend", "")), int(message.get("output", 0)))
            elif "done" in message:
                self._finish(self.current)
        return self.verdicts, None

    def _finish(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        self.current = Verdict(self.installs[len(self.verdicts)]) if len(self.verdicts) < len(self.installs) else None
        self.stage = None

    def _ended(self, outcome: str) -> tuple[list[Verdict], Verdict | None]:
        """The verdicts so far, with the fault of the plugin (or its backend) in the stage the child ended (or
        hung) in; a plugin whose probe it was is checked on in the next child."""
        if self.stage is not None and self.current is not None:
            fault, output = self._fault(self.current.install, outcome)
            if fault.backend:
                self.current = self.current.failed(fault, output)
            else:
                self._finish(Verdict(self.current.install, fault, self.current.output + output, self.current.probes))
        return self.verdicts, self.current

    def _fault(self, install: Install, outcome: str) -> tuple[Fault, str]:
        """The fault of the stage in progress, and what the child printed since it began."""
        assert self.stage is not None
        timed_out = outcome == "timed out"
        if timed_out:
            self.child.kill()
        code = self.child.wait()
        stage, backend, start = self.stage
        fault = Fault(install.name, install.distribution, install.version, stage, outcome, self.child.pid, _host_name(),
                      _now(), backend, seconds=(self.timeout or 0.0) if timed_out else 0.0,
                      ended="killed at the time limit" if timed_out else _how_it_ended(code))
        self.stderr.seek(max(start, os.fstat(self.stderr.fileno()).st_size - 4 * OUTPUT_CHARS))  # its tail, however long
        output = self.stderr.read().decode(errors="replace")[-OUTPUT_CHARS:].rstrip("\n")
        return fault, output + "\n" if output else ""


def _how_it_ended(code: int) -> str:
    if code >= 0:
        return f"exit status {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class _Told(FaultLog):
    """The child's fault log: the start of each stage is told to the parent instead of marked in a file."""

    def __init__(self, say: Callable[..., None]) -> None:
        super().__init__(None)
        self.say = say
        self.index = -1

    def begin(self, plugin: str, distribution: str, version: str, stage: str, backend: str = "") -> Path | None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.say(index=self.index, stage=stage, backend=backend, output=os.fstat(2).st_size)  # where its output begins
        return None


def serve(plugins: list[dict[str, Any]], skip: list[str]) -> None:
    """The child: import and register each plugin as discovery does, then ask each of its backends
    whether it is available as a command does (but those of the first plugin named in ``skip``), telling
    the parent each stage on the original stdout; what the plugins print goes to stderr. Ends the process
    when done."""
    from importlib.metadata import EntryPoint

    from ._global import discovering
    from ._plugins import GROUP, PluginLoader
    from ._records import PluginRecord
    from ._registry import Registry
    from ._settings import ENV_TIMEOUT

    global _serving
    _serving = True
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def say(**message: Any) -> None:
        report.write(json.dumps(message) + "\n")
        report.flush()

    told = _Told(say)
    loader = PluginLoader(Registry(), env={ENV_TIMEOUT: "0"}, faults=told)  # no time limit: the parent keeps it
    with discovering():
        for told.index, plugin in enumerate(plugins):
            install = Install(**plugin)
            record = PluginRecord(install.name, install.distribution, install.version)
            outcome = loader.imported(record, EntryPoint(install.name, install.value, GROUP).load)
            for backend in outcome.staged._backends.values() if outcome.staged is not None else ():
                if told.index or backend.name not in skip:
                    backend.availability()  # its probe's answer is the command's to find: not told
            say(index=told.index, done=True)
    report.close()
    os._exit(0)  # what the plugins left behind (threads, atexit functions) is not the check's business


