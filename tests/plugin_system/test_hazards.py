"""Plugins that crash, end, hang or raise a BaseException, each run in a child process (the harm
would take pytest down with it): the process they take down is the only one. The next command
works and names the plugin; a hang costs the time limit once and is reported "timed out".

The plugins are algoswap-test-hazards' (see conftest.py): ``hazard_<kind>`` does its harm at the
stage ``ALGOSWAP_TEST_HAZARD_STAGE`` names. Every child loads only numpy and that one plugin, with
a state directory of the test's own. No timing is asserted: hangs run under a 0.5 s limit and
sleep 60 s, so "it returned, and said timed out" is the whole claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import Installed, Ran, backend_rows, cli, run_python

OWNER = "algoswap-test-hazards 0.1.0"
STAGE_WORDS = {"import": "import", "registration": "registration (algoswap_register)", "probe": "availability probe"}
SELECT = ("import json, algoswap\n"
          "chosen = algoswap.select('relu', [(3,)])\n"
          "print(json.dumps([chosen.impl.qualified, dict(chosen.rejected)]))\n")


def hazard_env(name: str, stage: str, **env: str) -> dict[str, str]:
    return {"ALGOSWAP_PLUGINS": f"numpy,{name}", "ALGOSWAP_TEST_HAZARD_STAGE": stage, **env}


def row_of(done: Ran, name: str, stage: str) -> dict[str, Any]:
    """The plugin's row of `backends --json` (its backend's, for a probe)."""
    return backend_rows(done)[(name, name if stage == "probe" else None)]


def frame_label(name: str, stage: str) -> str:
    what = f"probe of backend {name!r}" if stage == "probe" else stage
    return f"<algoswap plugin {name!r} ({OWNER}): {what}>"


@pytest.mark.parametrize("stage", ["import", "registration", "probe"])
@pytest.mark.parametrize("kind", ["segfault", "exit"])
def test_a_crash_takes_down_one_process_and_the_next_names_the_plugin(
        hazards: Installed, tmp_path: Path, kind: str, stage: str) -> None:
    name, env = f"hazard_{kind}", hazard_env(f"hazard_{kind}", stage)
    first = cli(hazards, tmp_path, "backends", "--json", **env)
    if kind == "segfault":  # faulthandler names the plugin and the stage at the moment of the crash
        assert first.returncode != 0 and "Segmentation fault" in first.stderr, first.stderr
        assert frame_label(name, stage) in first.stderr, first.stderr
    else:
        assert first.returncode == 3, (first.returncode, first.stderr)
    second = cli(hazards, tmp_path, "backends", "--json", **env)
    row = row_of(second, name, stage)
    assert row["status"] == "crashed", row
    assert f"process {first.pid} ended during its {STAGE_WORDS[stage]}" in row["reason"], row
    assert f"skipped until retried: `algoswap retry {name}` or ALGOSWAP_RETRY_PLUGINS={name}" in row["reason"]
    assert backend_rows(second)[("numpy", "numpy")]["status"] == "available"


def test_a_crashed_plugin_is_retried_on_request(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "import")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3
    assert row_of(cli(hazards, tmp_path, "backends", "--json", **env), "hazard_exit", "import")["status"] == "crashed"
    assert cli(hazards, tmp_path, "backends", ALGOSWAP_RETRY_PLUGINS="hazard_exit", **env).returncode == 3  # imported again
    retry = cli(hazards, tmp_path, "retry", "hazard_exit", **env)
    assert (retry.returncode, retry.stdout.strip()) == (
        0, "forgot the faults of hazard_exit: the next command imports and probes them again")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3  # imported again, and it crashed again
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("forgot the faults of hazard_exit")
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("nothing to retry")


def test_a_new_version_of_a_crashed_plugin_is_retried(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "import")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3
    assert row_of(cli(hazards, tmp_path, "backends", "--json", **env), "hazard_exit", "import")["status"] == "crashed"
    fault = tmp_path / "state" / "faults" / "hazard_exit.json"
    record = json.loads(fault.read_text())
    fault.write_text(json.dumps({**record, "version": "0.0.9"}))  # it crashed an older version
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3


def test_faulthandler_names_the_plugin_whose_predicate_crashes(hazards: Installed, tmp_path: Path) -> None:
    done = run_python(["-c", SELECT], hazards, tmp_path, **hazard_env("hazard_segfault", "supports"))
    assert done.returncode != 0 and "Segmentation fault" in done.stderr
    assert frame_label("hazard_segfault", "supports() of relu hazard_segfault:direct") in done.stderr, done.stderr


@pytest.mark.parametrize("stage", ["import", "registration", "probe"])
def test_a_hanging_plugin_times_out_and_is_skipped_next_time(hazards: Installed, tmp_path: Path, stage: str) -> None:
    env = hazard_env("hazard_sleep", stage, ALGOSWAP_PLUGIN_TIMEOUT="0.5")
    first = cli(hazards, tmp_path, "backends", "--json", **env)
    row = row_of(first, "hazard_sleep", stage)
    story = f"its {STAGE_WORDS[stage]}{' of backend ' + repr('hazard_sleep') if stage == 'probe' else ''} did not finish " \
            f"within 0.5 s (ALGOSWAP_PLUGIN_TIMEOUT) in process {first.pid}"
    assert row["status"] == "timed out" and story in row["reason"], row
    assert backend_rows(first)[("numpy", "numpy")]["status"] == "available"
    caps = json.loads(cli(hazards, tmp_path, "caps", "--format", "json", **env).stdout)  # remembered: not run again
    if stage == "probe":
        assert caps["backends"]["hazard_sleep"]["status"] == "timed out" and story in caps["backends"]["hazard_sleep"]["reason"]
    else:
        plugin = next(p for p in caps["plugins"] if p["name"] == "hazard_sleep")
        assert plugin["status"] == "timed out" and story in plugin["error"]
    listed = run_python(["-c", "import algoswap; print({p.name: p.status for p in algoswap.plugins()})"], hazards, tmp_path, **env)
    assert f"'hazard_sleep': {'loaded' if stage == 'probe' else 'timed out'!r}" in listed.stdout, listed.stdout


def test_a_hanging_predicate_takes_its_backend_out_of_selection(hazards: Installed, tmp_path: Path) -> None:
    code = (
        "import json, algoswap\n"
        "first, second = algoswap.select('relu', [(3,)]), algoswap.select('relu', [(4,)])\n"
        "try:\n"
        "    algoswap.select('relu', [(5,)], algorithm='hazard_sleep:direct')\n"
        "except algoswap.NoImplementationError as exc:\n"
        "    explicit = str(exc)\n"
        "status = algoswap.capabilities('relu').to_dict()['backends']['hazard_sleep']['status']\n"
        "print(json.dumps([first.impl.qualified, dict(first.rejected), dict(second.rejected), explicit, status]))\n"
    )
    done = run_python(["-c", code], hazards, tmp_path, **hazard_env("hazard_sleep", "supports", ALGOSWAP_PLUGIN_TIMEOUT="0.5"))
    assert done.returncode == 0, done.stderr
    chosen, first, second, explicit, status = json.loads(done.stdout)
    timed_out = (f"timed out: supports() of relu hazard_sleep:direct ({OWNER}) did not answer within 0.5 s "
                 f"(ALGOSWAP_PLUGIN_TIMEOUT); backend 'hazard_sleep' is out of selection in this process")
    assert chosen == "numpy:direct" and first == {"hazard_sleep:direct": timed_out}
    assert second == {"hazard_sleep:direct": f"backend unavailable: {timed_out}"}
    assert f"hazard_sleep:direct: backend unavailable: {timed_out}" in explicit
    assert status == "timed out"


@pytest.mark.parametrize("stage, fragment", [
    ("import", "broken: import failed: HazardError: a BaseException from a plugin"),
    ("registration", "broken: HazardError: a BaseException from a plugin"),
    ("probe", "unavailable: availability probe raised HazardError: a BaseException from a plugin"),
])
def test_a_base_exception_is_a_reason_not_a_traceback(hazards: Installed, tmp_path: Path, stage: str, fragment: str) -> None:
    done = cli(hazards, tmp_path, "backends", **hazard_env("hazard_baseexc", stage))  # no traceback: run_python checks
    assert done.returncode == 0, done.stderr
    assert fragment in done.stdout, done.stdout


def test_a_base_exception_in_a_predicate_is_a_rejection(hazards: Installed, tmp_path: Path) -> None:
    done = run_python(["-c", SELECT], hazards, tmp_path, **hazard_env("hazard_baseexc", "supports"))
    assert json.loads(done.stdout) == [
        "numpy:direct", {"hazard_baseexc:direct": "supports() raised HazardError: a BaseException from a plugin"}]
