"""Supervision in-process: the time limit on predicates and probes, KeyboardInterrupt, faulthandler
frames, the fault log's markers (live processes are not crashes) and the settings. Plugins that
block wait on an Event the test sets afterwards, so no thread outlives its test for long."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any, Iterator

import pytest

import algoswap
from algoswap import _global
from algoswap._faults import Fault, FaultLog
from algoswap._guard import Guard, named_frame
from algoswap._plugins import PluginLoader
from algoswap._records import PluginRecord
from algoswap._registry import Registry
from algoswap._select import select
from algoswap._settings import DEFAULT_TIMEOUT, state_directory, timeout_from


def plugin(register: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)


def loaded(tmp_path: Path, *plugins: Any, timeout: str = "0.3") -> Registry:
    """A registry of numpy and ``plugins`` (as if installed: each has a distribution), a short time limit."""
    registry = Registry()
    env = {"ALGOSWAP_PLUGINS": "numpy", "ALGOSWAP_PLUGIN_TIMEOUT": timeout, "ALGOSWAP_STATE_DIR": str(tmp_path / "state")}
    loader = PluginLoader(registry, env=env)
    loader.discover()
    for index, item in enumerate(plugins):
        loader.load(item, PluginRecord(f"inline{index}", distribution=f"inline-dist-{index}", version="1.0"))
    return registry


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What a blocking plugin waits for; set when the test ends, so its abandoned thread finishes."""
    event = threading.Event()
    yield event
    event.set()


def test_a_blocking_predicate_times_out_and_takes_its_backend_out(tmp_path: Path, gate: threading.Event) -> None:
    def register(registry: Any) -> None:
        registry.add_backend("stuck", priority=10)
        registry.add_implementation("relu", "direct", "stuck", abs, supports=lambda call: gate.wait(60))

    registry = loaded(tmp_path, plugin(register))
    chosen = select(registry, "relu", [(3,)], ["float32"])
    assert chosen.impl.qualified == "numpy:direct"
    reason = dict(chosen.rejected)["stuck:direct"]
    assert reason.startswith("timed out: supports() of relu stuck:direct (inline-dist-0 1.0) did not answer within 0.3 s")
    assert registry.backends["stuck"].status == "timed out"
    assert dict(select(registry, "relu", [(4,)], ["float32"]).rejected)["stuck:direct"] == f"backend unavailable: {reason}"


def test_a_blocking_probe_times_out(tmp_path: Path, gate: threading.Event) -> None:
    registry = loaded(tmp_path, plugin(lambda registry: registry.add_backend("stuck", probe=lambda: gate.wait(60))))
    assert registry.backends["stuck"].availability().startswith(
        "timed out: its availability probe of backend 'stuck' did not finish within 0.3 s (ALGOSWAP_PLUGIN_TIMEOUT)")
    assert registry.backends["stuck"].status == "timed out"


def test_a_blocking_registration_times_out_and_registers_nothing(tmp_path: Path, gate: threading.Event) -> None:
    def register(registry: Any) -> None:
        registry.add_backend("late")
        gate.wait(60)

    registry = loaded(tmp_path, plugin(register))
    record = registry.plugins[-1]
    assert record.status == "timed out" and "registration (algoswap_register) did not finish within 0.3 s" in record.error
    gate.set()  # the abandoned registration finishes now: what it staged is never committed
    assert "late" not in registry.backends


def test_without_a_time_limit_plugin_code_runs_on_the_calling_thread(tmp_path: Path) -> None:
    threads = []

    def register(registry: Any) -> None:
        threads.append(threading.current_thread())
        registry.add_backend("here", probe=lambda: threads.append(threading.current_thread()) or True)

    registry = loaded(tmp_path, plugin(register), timeout="0")
    assert registry.backends["here"].availability() is True
    assert threads == [threading.current_thread()] * 2


def test_predicates_see_the_callers_context_and_may_select_themselves(tmp_path: Path) -> None:
    import contextvars

    flag: contextvars.ContextVar[str] = contextvars.ContextVar("flag", default="unset")
    seen = []

    def supports(call: Any) -> bool:
        seen.append(flag.get())
        inner = select(registry, "relu", [(2,)], ["float32"], algorithm="numpy:direct")  # nested: runs inline
        return inner.impl.qualified == "numpy:direct"

    def register(registry: Any) -> None:
        registry.add_backend("nested", priority=10)
        registry.add_implementation("relu", "direct", "nested", abs, supports=supports)

    registry = loaded(tmp_path, plugin(register), timeout="5")
    flag.set("from the caller")
    assert select(registry, "relu", [(3,)], ["float32"]).impl.qualified == "nested:direct"
    assert seen == ["from the caller"]


@pytest.mark.parametrize("where", ["registration", "probe", "supports"])
def test_keyboard_interrupt_is_raised_again(tmp_path: Path, where: str) -> None:
    def interrupt(*args: Any) -> Any:
        raise KeyboardInterrupt

    def register(registry: Any) -> None:
        if where == "registration":
            interrupt()
        registry.add_backend("keys", probe=interrupt if where == "probe" else None, priority=10)
        registry.add_implementation("relu", "direct", "keys", abs, supports=interrupt)

    with pytest.raises(KeyboardInterrupt):
        registry = loaded(tmp_path, plugin(register))
        select(registry, "relu", [(3,)], ["float32"])


@pytest.mark.parametrize("timeout", ["5", "0"])  # on a helper thread, or on the discovering thread itself
def test_a_plugin_using_the_registry_while_plugins_load_is_broken_not_stuck(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, timeout: str) -> None:
    entry_point = types.SimpleNamespace(name="impatient", dist=None, load=lambda: algoswap.registry())
    monkeypatch.setattr("algoswap._plugins._entry_points", lambda: [entry_point])
    monkeypatch.setattr(_global, "_registry", None)  # restored afterwards
    monkeypatch.setenv("ALGOSWAP_PLUGIN_TIMEOUT", timeout)
    monkeypatch.setenv("ALGOSWAP_STATE_DIR", str(tmp_path))
    record = algoswap.registry().plugins[0]
    assert (record.name, record.status) == ("impatient", "broken")
    assert "may not use algoswap's registry while plugins are being imported and registered" in record.error


def test_plugin_code_runs_in_a_frame_named_after_the_plugin(tmp_path: Path) -> None:
    dump = tmp_path / "dump.txt"
    with dump.open("w") as stream:
        Guard(5.0).run(named_frame("<algoswap plugin 'x' (x-dist 1.0): import>"), faulthandler.dump_traceback, stream)
    assert "<algoswap plugin 'x' (x-dist 1.0): import>" in dump.read_text()


# ----------------------------------------------------------------------------- the fault log


def write_marker(log: FaultLog, pid: int, host: str | None = None, start: str = "") -> Path:
    marker = log.begin("victim", "victim-dist", "1.0", "import")
    assert marker is not None
    content = json.loads(marker.read_text())
    marker.write_text(json.dumps({**content, "pid": pid, "host": host or content["host"], "start": start}))
    return marker


def finished_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_marker_of_a_live_process_is_not_a_crash(tmp_path: Path) -> None:
    log = FaultLog(tmp_path)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:
            markers = [write_marker(log, os.getpid()), write_marker(log, alive.pid),
                       write_marker(log, finished_pid(), host=log.host + "-elsewhere")]
            log.collect()
        finally:
            alive.kill()
    assert all(marker.exists() for marker in markers)  # still running (or not ours to judge): left alone
    assert log.faults() == []


def test_the_marker_of_a_process_that_is_gone_becomes_a_crash(tmp_path: Path) -> None:
    log = FaultLog(tmp_path)
    gone = finished_pid()
    marker = write_marker(log, gone)
    log.collect()
    assert not marker.exists()
    [fault] = log.faults()
    assert (fault.plugin, fault.outcome, fault.pid, fault.stage) == ("victim", "crashed", gone, "import")
    assert fault.story().startswith(f"process {gone} ended during its import (the plugin crashed or exited the process) on ")


def test_a_reused_pid_is_not_taken_for_the_process_that_crashed(tmp_path: Path) -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("process start times come from /proc")
    log = FaultLog(tmp_path)
    write_marker(log, os.getpid(), start="1")  # our pid, but a process that started at another time
    log.collect()
    assert [fault.pid for fault in log.faults()] == [os.getpid()]


def test_faults_are_forgotten_on_retry_and_for_another_version(tmp_path: Path) -> None:
    log = FaultLog(tmp_path)
    for plugin, version in (("a", "1.0"), ("b", "1.0")):
        log.record(Fault(plugin, f"{plugin}-dist", version, "import", "crashed", 1, log.host, "now"))
    env = {"ALGOSWAP_STATE_DIR": str(tmp_path), "ALGOSWAP_PLUGINS": "no-such-plugin", "ALGOSWAP_RETRY_PLUGINS": "a-dist"}
    loader = PluginLoader(Registry(), env=env)
    supervisor = loader._supervisor(PluginRecord("a", "a-dist", "1.0"))
    assert supervisor.previous_fault() is None  # retried by distribution name, and forgotten
    upgraded = loader._supervisor(PluginRecord("b", "b-dist", "2.0"))
    assert upgraded.previous_fault() is None  # another version is installed now
    assert log.faults() == []


def test_retry_plugins_forgets_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALGOSWAP_STATE_DIR", str(tmp_path))
    log = FaultLog(tmp_path)
    log.record(Fault("a", "a-dist", "1.0", "probe", "timed out", 1, log.host, "now", backend="fast", seconds=2))
    log.record(Fault("b", "b-dist", "1.0", "import", "crashed", 1, log.host, "now"))
    assert algoswap.retry_plugins("fast") == ["a:fast"]  # a backend name finds its probe's fault
    assert algoswap.retry_plugins() == ["b"]
    assert algoswap.retry_plugins() == []


def test_without_a_writable_state_directory_nothing_is_remembered_and_nothing_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log = FaultLog(blocker / "state")
    assert log.begin("p", "p-dist", "1.0", "import") is None
    log.collect()
    assert log.faults() == []
    registry = Registry()
    PluginLoader(registry, env={"ALGOSWAP_STATE_DIR": str(blocker), "ALGOSWAP_PLUGINS": "numpy"}).discover()
    assert registry.backends["numpy"].availability() is True


def test_settings() -> None:
    assert state_directory({"ALGOSWAP_STATE_DIR": "/x/y"}) == Path("/x/y")
    assert state_directory({"XDG_STATE_HOME": "/s"}) == Path("/s/algoswap")
    assert state_directory({}) == Path.home() / ".local" / "state" / "algoswap"
    assert timeout_from({}) == DEFAULT_TIMEOUT
    assert timeout_from({"ALGOSWAP_PLUGIN_TIMEOUT": "2.5"}) == 2.5
    assert timeout_from({"ALGOSWAP_PLUGIN_TIMEOUT": "0"}) is None
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(algoswap.PluginError, match="ALGOSWAP_PLUGIN_TIMEOUT must be a number of seconds"):
            timeout_from({"ALGOSWAP_PLUGIN_TIMEOUT": bad})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_helper_threads_of_its_own(tmp_path: Path) -> None:
    def register(registry: Any) -> None:
        registry.add_backend("checked", priority=10)
        registry.add_implementation("relu", "direct", "checked", abs, supports=lambda call: call.out_shape[0] < 100)

    registry = loaded(tmp_path, plugin(register), timeout="5")
    assert select(registry, "relu", [(3,)], ["float32"]).impl.qualified == "checked:direct"  # the parent's helper runs
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's helper thread did not come along
        try:
            chosen = select(registry, "relu", [(4,)], ["float32"])
            os.write(write, json.dumps([chosen.impl.qualified, dict(chosen.rejected)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        reply = answer.read()
    os.waitpid(pid, 0)
    assert json.loads(reply) == ["checked:direct", {}]
