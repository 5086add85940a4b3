"""Plugins that crash, end, hang or raise a BaseException, each run in a child process (the harm
would take pytest down with it). At import and registration the harm ends or hangs only the child
process that checks a new plugin before it is loaded: the command works and names the plugin. So does
the harm of a probe, which the check runs too; one that the check did not see (it happens only in the
command's environment) takes down the process it happens in, and the next command works and names the
plugin. A hang costs the time limit once and is reported "timed out".

The plugins are algoswap-test-hazards' (see conftest.py): ``hazard_<kind>`` does its harm at the
stage ``ALGOSWAP_TEST_HAZARD_STAGE`` names. Every child loads only numpy and that one plugin, with
a state directory and a record of plugin checks of the test's own (what a hazard does depends on
the variable, which its install does not show). No timing is asserted: hangs run under a 0.5 s
limit and sleep 60 s, so "it returned, and said timed out" is the whole claim.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import CACHE, Installed, Ran, backend_rows, cli, imported, run_python

OWNER = "algoswap-test-hazards 0.1.0"
STAGE_WORDS = {"import": "import", "registration": "registration (algoswap_register)", "probe": "availability probe"}
SELECT = ("import json, algoswap\n"
          "chosen = algoswap.select('relu', [(3,)])\n"
          "print(json.dumps([chosen.impl.qualified, dict(chosen.rejected)]))\n")


CHECKED = "new or changed plugin(s) in child processes before loading them"  # the DEBUG line of a check
LISTING = ("import json, logging, algoswap\n"
           "logging.basicConfig(level=logging.DEBUG, format='%(message)s')\n"
           "print(json.dumps({p.name: [p.version, p.status, p.error] for p in algoswap.plugins()}))\n")


@pytest.fixture(autouse=True)
def _own_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record of plugin checks of the test's own, for the commands it runs (run_python passes it on)."""
    monkeypatch.setenv(CACHE, str(tmp_path / "cache"))


def hazard_env(name: str, stage: str, **env: str) -> dict[str, str]:
    return {"ALGOSWAP_PLUGINS": f"numpy,{name}", "ALGOSWAP_TEST_HAZARD_STAGE": stage, **env}


def checking_pid(reason: str, ended: str) -> int:
    """The pid of the process that checked the plugin, from the story of a check it ended."""
    match = re.search(rf"ended the process that checked it before loading it \(process (\d+): {ended}\) on ", reason)
    assert match, reason
    return int(match.group(1))


def row_of(done: Ran, name: str, stage: str) -> dict[str, Any]:
    """The plugin's row of `backends --json` (its backend's, for a probe)."""
    return backend_rows(done)[(name, name if stage == "probe" else None)]


def frame_label(name: str, stage: str) -> str:
    what = f"probe of backend {name!r}" if stage == "probe" else stage
    return f"<algoswap plugin {name!r} ({OWNER}): {what}>"


@pytest.mark.parametrize("stage", ["import", "registration"])
@pytest.mark.parametrize("kind, ended", [("segfault", "SIGSEGV"), ("exit", "exit status 3")])
def test_a_plugin_that_ends_the_process_at_load_ends_only_its_check(
        hazards: Installed, tmp_path: Path, kind: str, ended: str, stage: str) -> None:
    name, env = f"hazard_{kind}", hazard_env(f"hazard_{kind}", stage)
    first = cli(hazards, tmp_path, "backends", "--json", **env)  # the first command that finds it
    row = backend_rows(first)[(name, None)]
    assert row["status"] == "crashed", row
    assert f"its {STAGE_WORDS[stage]} ended the process that checked it before loading it (process " in row["reason"]
    checking_pid(row["reason"], ended)
    assert f"skipped until retried: `algoswap retry {name}` or ALGOSWAP_RETRY_PLUGINS={name}" in row["reason"]
    assert backend_rows(first)[("numpy", "numpy")]["status"] == "available"
    chosen = run_python(["-c", SELECT], hazards, tmp_path, **env)
    assert json.loads(chosen.stdout)[0] == "numpy:direct", chosen.stderr
    verbose = cli(hazards, tmp_path, "backends", "--verbose", **env)  # what the check printed: faulthandler's dump
    assert verbose.returncode == 0, verbose.stderr
    if kind == "segfault":
        assert "Segmentation fault" in verbose.stdout and frame_label(name, stage) in verbose.stdout, verbose.stdout


def test_a_plugin_is_checked_once_and_a_failed_one_never_imported_in_process(
        hazards: Installed, tmp_path: Path, import_log: Path) -> None:
    env = hazard_env("hazard_exit", "import")
    first = run_python(["-c", LISTING], hazards, tmp_path, log=import_log, **env)
    assert "checked 2 " + CHECKED in first.stderr, first.stderr  # numpy's and hazard_exit's, in one child
    assert json.loads(first.stdout)["hazard_exit"][1] == "crashed"
    assert imported(import_log) == ["algoswap_test_hazards.exit"]  # by the check
    second = run_python(["-c", LISTING], hazards, tmp_path, log=import_log, **env)
    assert CHECKED not in second.stderr, second.stderr  # the record's verdicts: no child
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert imported(import_log) == ["algoswap_test_hazards.exit"]  # never in-process


def test_several_failing_plugins_are_each_named(hazards: Installed, tmp_path: Path) -> None:
    """One child checks them in turn; after each that ends or hangs it, a new one checks the rest."""
    env = {"ALGOSWAP_PLUGINS": "hazard_segfault,hazard_exit,hazard_sleep,hazard_baseexc,numpy",
           "ALGOSWAP_PLUGIN_TIMEOUT": "0.5"}
    rows = backend_rows(cli(hazards, tmp_path, "backends", "--json", **env))
    statuses = {plugin: row["status"] for (plugin, _), row in rows.items() if row["status"] != "disabled"}
    assert statuses == {"hazard_baseexc": "broken", "hazard_exit": "crashed", "hazard_segfault": "crashed",
                        "hazard_sleep": "timed out", "numpy": "available"}
    pids = {checking_pid(rows[("hazard_exit", None)]["reason"], "exit status 3"),
            checking_pid(rows[("hazard_segfault", None)]["reason"], "SIGSEGV")}
    assert len(pids) == 2


def test_an_upgraded_or_reinstalled_plugin_is_checked_again(hazards: Installed, tmp_path: Path) -> None:
    site = Installed(shutil.copytree(hazards.site, tmp_path / "site"), 0.0)
    env = hazard_env("hazard_exit", "import")

    def listing() -> tuple[str, list[str]]:
        done = run_python(["-c", LISTING], site, tmp_path, **env)
        return done.stderr, json.loads(done.stdout)["hazard_exit"]

    assert CHECKED in listing()[0]
    assert CHECKED not in listing()[0]
    dist_info = site.site / "algoswap_test_hazards-0.1.0.dist-info"
    metadata = dist_info / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.1.0", "Version: 0.2.0"))
    log, (version, status, _) = listing()
    assert "checked 1 " + CHECKED + " (hazard_exit)" in log and (version, status) == ("0.2.0", "crashed")
    assert CHECKED not in listing()[0]
    fresh = shutil.copytree(dist_info, dist_info.with_name("reinstalled"))  # pip install --force-reinstall
    shutil.rmtree(dist_info)
    fresh.rename(dist_info)
    assert "checked 1 " + CHECKED + " (hazard_exit)" in listing()[0]
    module = site.site / "algoswap_test_hazards" / "__init__.py"  # an edit of an editable install's top module
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 10**9))
    assert "checked 1 " + CHECKED + " (hazard_exit)" in listing()[0]
    assert CHECKED not in listing()[0]


def test_an_unreadable_record_is_written_again_and_an_unwritable_one_changes_nothing(
        hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "import")
    record = tmp_path / "cache" / "plugin-checks-2.json"
    record.parent.mkdir()
    record.write_text('{"verdicts": [{"install": ')  # as a process killed while writing it would leave it, were it not atomic
    first = cli(hazards, tmp_path, "backends", **env)
    assert first.returncode == 0 and "crashed: its import ended the process that checked it" in first.stdout
    assert f"algoswap: warning: ignoring the unreadable record of plugin checks {record}" in first.stderr
    verdicts = json.loads(record.read_text())["verdicts"]
    assert sorted(v["install"]["name"] for v in verdicts) == ["hazard_exit", "numpy"]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    for _ in range(2):  # nothing remembered: each command checks again, and works
        done = cli(hazards, tmp_path, "backends", **env, ALGOSWAP_CACHE_DIR=str(blocked / "cache"))
        assert done.returncode == 0 and "crashed: its import ended the process that checked it" in done.stdout
        assert "algoswap: warning: cannot write the record of plugin checks" in done.stderr


def test_commands_checking_at_the_same_time_leave_a_whole_record(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "import")
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: cli(hazards, tmp_path, "backends", "--json", **env), range(4)))
    assert [row_of(done, "hazard_exit", "import")["status"] for done in runs] == ["crashed"] * 4
    verdicts = json.loads((tmp_path / "cache" / "plugin-checks-2.json").read_text())["verdicts"]
    assert sorted(v["install"]["name"] for v in verdicts) == ["hazard_exit", "numpy"]


@pytest.mark.parametrize("setting, line", [
    ("sys.path.append(pathlib.Path('/no/such/folder'))", "checked 1 " + CHECKED),  # a path that is no str
    ("sys.executable = '/bin/false'", "could not check plugins in a child process (/bin/false -c ...): they are "
                                      "loaded unchecked"),  # a child that ends at once: no verdict, no harm
])
def test_the_check_copes_with_its_process(hazards: Installed, tmp_path: Path, setting: str, line: str) -> None:
    code = f"import pathlib, sys\n{setting}\n{LISTING}"
    done = run_python(["-c", code], hazards, tmp_path, ALGOSWAP_PLUGINS="numpy")
    assert done.returncode == 0 and line in done.stderr, done.stderr
    assert json.loads(done.stdout)["numpy"][1] == "loaded"


def single_file_plugin(tmp_path: Path, name: str, code: str) -> Installed:
    """A site directory holding one installed distribution ``<name>-plugin`` 1.0, as pip leaves one: its
    entry point ``name`` is the module ``<name>_plugin``, whose source is ``code``."""
    site = tmp_path / "site"
    dist_info = site / f"{name}_plugin-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[algoswap.backends]\n{name} = {name}_plugin\n")
    (site / f"{name}_plugin.py").write_text(code)
    return Installed(site, 0.0)


def test_a_plugin_using_the_registry_at_import_is_broken_in_its_check_too(tmp_path: Path) -> None:
    """The check's process refuses the registry to plugin code as discovery does (else its discovery would
    check the plugin in a child of its own, which would do the same)."""
    site = single_file_plugin(tmp_path, "impatient", "import algoswap\nalgoswap.registry()\n")
    done = cli(site, tmp_path, "backends", "--json", ALGOSWAP_PLUGINS="numpy,impatient")
    row = backend_rows(done)[("impatient", None)]
    assert row["status"] == "broken", row
    assert "may not use algoswap's registry while plugins are being imported and registered" in row["reason"]


PROBED = ("import json, logging, algoswap\n"
          "logging.basicConfig(level=logging.DEBUG, format='%(message)s')\n"
          "chosen = algoswap.select('relu', [(3,)])\n"
          "caps = algoswap.capabilities('relu').to_dict()['backends']\n"
          "print(json.dumps([chosen.impl.qualified, dict(chosen.rejected), caps]))\n")


@pytest.mark.parametrize("kind, story", [
    ("segfault", "ended the process that checked it before loading it (process {pid}: SIGSEGV)"),
    ("exit", "ended the process that checked it before loading it (process {pid}: exit status 3)"),
    ("sleep", "did not finish within 0.5 s (ALGOSWAP_PLUGIN_TIMEOUT) in the process that checked it before loading it "
              "(process {pid})"),
], ids=["segfault", "exit", "sleep"])
def test_a_probe_that_ends_or_hangs_the_process_ends_only_its_check(
        hazards: Installed, tmp_path: Path, kind: str, story: str) -> None:
    name = f"hazard_{kind}"
    env = hazard_env(name, "probe", ALGOSWAP_PLUGIN_TIMEOUT="0.5")
    first = cli(hazards, tmp_path, "backends", "--json", **env)  # the first command that finds it, and probes it
    row = row_of(first, name, "probe")
    status = "timed out" if kind == "sleep" else "crashed"
    assert row["status"] == status, row
    pid = re.search(r"checked it before loading it \(process (\d+)", row["reason"])
    assert pid and f"its availability probe of backend {name!r} {story.format(pid=pid.group(1))} on " in row["reason"], row
    assert f"skipped until retried: `algoswap retry {name}` or ALGOSWAP_RETRY_PLUGINS={name}" in row["reason"]
    assert backend_rows(first)[("numpy", "numpy")]["status"] == "available"
    table = cli(hazards, tmp_path, "backends", **env).stdout
    assert f"{status}: its availability probe" in table and f"{status}: {status}" not in table, table
    second = run_python(["-c", PROBED], hazards, tmp_path, **env)  # a selection that reaches the backend
    assert CHECKED not in second.stderr, second.stderr  # the record's verdict: no child
    chosen, rejected, caps = json.loads(second.stdout)
    assert chosen == "numpy:direct" and rejected == {f"{name}:direct": f"backend unavailable: {row['reason']}"}
    assert (caps[name]["status"], caps[name]["reason"]) == (status, row["reason"])


def test_each_backend_of_a_plugin_is_probed_and_those_whose_probe_ends_the_check_are_out(tmp_path: Path) -> None:
    """The plugin's check goes on in a new child after each probe that ends one, without that probe."""
    code = ("import ctypes, os\n"
            "def algoswap_api_version():\n    return '>=1,<2'\n"
            "def algoswap_register(registry):\n"
            "    registry.add_backend('exits', probe=lambda: os._exit(3))\n"
            "    registry.add_backend('segfaults', probe=lambda: ctypes.string_at(0))\n"
            "    registry.add_backend('fine', probe=lambda: True)\n")
    site = single_file_plugin(tmp_path, "probing", code)
    env = {"ALGOSWAP_PLUGINS": "numpy,probing"}
    rows = backend_rows(cli(site, tmp_path, "backends", "--json", **env))
    assert {backend: row["status"] for (plugin, backend), row in rows.items() if plugin in ("numpy", "probing")} == {
        "numpy": "available", "exits": "crashed", "segfaults": "crashed", "fine": "available"}
    pids = {checking_pid(rows[("probing", "exits")]["reason"], "exit status 3"),
            checking_pid(rows[("probing", "segfaults")]["reason"], "SIGSEGV")}
    assert len(pids) == 2
    retry = cli(site, tmp_path, "retry", "segfaults", **env)  # its plugin is checked again, whole
    assert retry.stdout.strip() == ("forgot the faults of probing:exits, probing:segfaults: the next command imports "
                                    "and probes them again")
    again = backend_rows(cli(site, tmp_path, "backends", "--json", **env))
    assert checking_pid(again[("probing", "exits")]["reason"], "exit status 3") not in pids


@pytest.mark.parametrize("kind", ["segfault", "exit"])
def test_a_crash_in_a_probe_its_check_did_not_see_takes_down_one_process_and_the_next_names_it(
        hazards: Installed, tmp_path: Path, kind: str) -> None:
    """A probe whose harm depends on the command's environment: the check passed it."""
    name, env = f"hazard_{kind}", hazard_env(f"hazard_{kind}", "probe")
    checked_harmless(hazards, tmp_path, name)
    first = cli(hazards, tmp_path, "backends", "--json", **env)
    if kind == "segfault":  # faulthandler names the plugin and the stage at the moment of the crash
        assert first.returncode != 0 and "Segmentation fault" in first.stderr, first.stderr
        assert frame_label(name, "probe") in first.stderr, first.stderr
    else:
        assert first.returncode == 3, (first.returncode, first.stderr)
    second = cli(hazards, tmp_path, "backends", "--json", **env)
    row = row_of(second, name, "probe")
    assert row["status"] == "crashed", row
    assert f"process {first.pid} ended during its availability probe" in row["reason"], row
    assert f"skipped until retried: `algoswap retry {name}` or ALGOSWAP_RETRY_PLUGINS={name}" in row["reason"]
    assert backend_rows(second)[("numpy", "numpy")]["status"] == "available"


def checked_harmless(hazards: Installed, cwd: Path, name: str) -> None:
    """Have the hazard's check pass: it does its harm only in supports(), which no check runs."""
    assert cli(hazards, cwd, "backends", **hazard_env(name, "supports")).returncode == 0


def test_a_crashed_plugin_is_retried_on_request(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "probe")
    checked_harmless(hazards, tmp_path, "hazard_exit")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3
    assert row_of(cli(hazards, tmp_path, "backends", "--json", **env), "hazard_exit", "probe")["status"] == "crashed"
    assert cli(hazards, tmp_path, "backends", ALGOSWAP_RETRY_PLUGINS="hazard_exit", **env).returncode == 3  # probed again
    retry = cli(hazards, tmp_path, "retry", "hazard_exit", **env)
    assert (retry.returncode, retry.stdout.strip()) == (
        0, "forgot the faults of hazard_exit:hazard_exit: the next command imports and probes them again")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3  # probed again, and it crashed again
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("forgot the faults of hazard_exit")
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("nothing to retry")


def test_a_plugin_that_failed_its_check_is_checked_again_on_request(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "import")

    def checked_by(**more: str) -> int:
        row = row_of(cli(hazards, tmp_path, "backends", "--json", **env, **more), "hazard_exit", "import")
        return checking_pid(row["reason"], "exit status 3")

    first = checked_by()
    assert checked_by() == first  # remembered
    again = checked_by(ALGOSWAP_RETRY_PLUGINS="hazard_exit")
    assert again != first and checked_by() == again
    retry = cli(hazards, tmp_path, "retry", "hazard_exit", **env)
    assert (retry.returncode, retry.stdout.strip()) == (
        0, "forgot the faults of hazard_exit: the next command imports and probes them again")
    assert checked_by() not in (first, again)
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("forgot the faults of hazard_exit")
    assert cli(hazards, tmp_path, "retry", **env).stdout.startswith("nothing to retry")


def test_a_new_version_of_a_crashed_plugin_is_retried(hazards: Installed, tmp_path: Path) -> None:
    env = hazard_env("hazard_exit", "probe")
    checked_harmless(hazards, tmp_path, "hazard_exit")
    assert cli(hazards, tmp_path, "backends", **env).returncode == 3
    assert row_of(cli(hazards, tmp_path, "backends", "--json", **env), "hazard_exit", "probe")["status"] == "crashed"
    fault = tmp_path / "state" / "faults" / "hazard_exit%3Ahazard_exit.json"
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
            "within 0.5 s (ALGOSWAP_PLUGIN_TIMEOUT) in the process that checked it before loading it (process "
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
