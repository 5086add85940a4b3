"""The plugin system through the ``algoswap`` CLI and fresh interpreters, with ``PYTHONPATH`` pointing
at the directory the throwaway plugins (see conftest.py) were installed into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import DENY_FAILING, EXPECTED, FAILING, MODULES, Installed, backend_rows, cli, imported, run_python


def test_cli_backends_json_lists_every_plugin(installed: Installed, tmp_path: Path, import_log: Path) -> None:
    rows = backend_rows(cli(installed, tmp_path, "backends", "--json", log=import_log))
    assert rows[("numpy", "numpy")]["status"] == "available"
    good = rows[("test_good", "toy")]
    assert (good["distribution"], good["version"], good["status"], good["reason"]) == ("algoswap-test-good", "1.2.0", "available", None)
    offline = rows[("test_good", "toy_offline")]
    assert (offline["status"], offline["reason"]) == ("unavailable", "no toy device here")
    for name in FAILING:
        distribution, version, status, fragments = EXPECTED[name]
        row = rows[(name, None)]
        assert (row["distribution"], row["version"], row["status"]) == (distribution, version, status)
        for fragment in fragments:
            assert fragment in row["reason"]
    assert not [key for key in rows if key[0] in FAILING and key[1] is not None]
    assert sorted(imported(import_log)) == sorted(MODULES)


def test_import_does_not_discover_plugins_first_use_does(installed: Installed, tmp_path: Path, import_log: Path) -> None:
    code = (
        "import sys, algoswap\n"
        "for name in ('algoswap_numpy', 'pluggy', 'torch', 'algoswap_test_good', 'algoswap._global', 'algoswap._plugins',\n"
        "             'algoswap._quarantine'):\n"
        "    assert name not in sys.modules, name\n"
        "assert open(sys.argv[1]).read() == '', 'a plugin was imported by import algoswap'\n"
        "statuses = {p.name: p.status for p in algoswap.plugins()}\n"
        "assert statuses['test_good'] == 'loaded' and statuses['test_broken'] == 'broken', statuses\n"
        "assert 'algoswap_numpy' in sys.modules and 'algoswap_test_good' in sys.modules\n"
        "print('ok')\n"
    )
    done = run_python(["-c", code, str(import_log)], installed, tmp_path, log=import_log)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


DEMO = ("demo", "--small", "--repeats", "1")  # the whole job, on the reduced input: isolation is the point here
COMMANDS = [("backends",), ("backends", "--json"), ("caps",), ("caps", "--full"), ("caps", "--format", "json"), ("ops",), DEMO]
OFFLINE = "no toy device here"  # toy_offline's reason: said once, below the tables, never in their rows


@pytest.mark.parametrize("command", COMMANDS[:1] + COMMANDS[2:], ids=" ".join)  # backends --json: see above
def test_cli_works_with_broken_plugins(installed: Installed, tmp_path: Path, command: tuple[str, ...]) -> None:
    done = cli(installed, tmp_path, *command)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    if command == ("backends",):
        assert "[test_broken]" in out and "broken: import failed: RuntimeError: boom at import" in out
        assert "toy_offline" in out and "unavailable: no toy device here" in out
    elif command == ("caps",):
        header, relu = out.splitlines()[0], [line for line in out.splitlines() if line.startswith("relu ")][0]
        assert "toy_offline (unavailable)" in header and out.count(OFFLINE) == 1
        assert f"\n  toy_offline: {OFFLINE}\n" in out and "- none" in out.splitlines()[-1]
        assert relu.split().count("direct") >= 3  # numpy, toy, toy_offline (and other installed backends)
    elif command == ("caps", "--full"):
        relu = out.split("\n\nrelu\n", 1)[1].split("\n\n", 1)[0].splitlines()
        algorithms = relu[0].split()[1:]  # direct, and those of other installed backends (mps: mpsgraph)
        assert "direct" in algorithms, relu[0]
        column = algorithms.index("direct") - len(algorithms)  # cells from the right: a backend's name may hold spaces
        rows = {" ".join(line.split()[:-len(algorithms)]): line.split()[column] for line in relu[1:]}
        expected = {"numpy": "✓", "toy": "✓", "toy_offline (unavailable)": "✓"}
        assert rows.items() >= expected.items()  # other installed backends (dnnl) may add rows
        assert out.count(OFFLINE) == 1 and f"\n  toy_offline: {OFFLINE}\n" in out and "✗*" in out.splitlines()[-1]
    elif command == ("caps", "--format", "json"):
        document = json.loads(out)
        assert document["backends"]["toy_offline"]["status"] == "unavailable"
        assert document["backends"]["toy_offline"]["reason"] == "no toy device here"
        assert document["backends"]["toy"]["distribution"] == "algoswap-test-good"
        assert document["ops"]["relu"]["backends"]["toy"]["direct"]["supported"] is True
        plugins = {p["name"]: p for p in document["plugins"]}
        assert {n: plugins[n]["status"] for n in FAILING} == {n: EXPECTED[n][2] for n in FAILING}
    elif command == ("ops",):
        assert "relu" in out and "conv2d" in out
    elif command == DEMO:
        assert "numpy:direct" in out
        assert any(line.startswith("toy_offline ") and "unavailable: no toy device here" in line for line in out.splitlines())


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_cli_works_with_every_plugin_disabled(installed: Installed, tmp_path: Path, import_log: Path,
                                              command: tuple[str, ...]) -> None:
    done = cli(installed, tmp_path, *command, log=import_log, ALGOSWAP_PLUGINS="no-such-plugin")
    assert imported(import_log) == []
    assert done.returncode == 0, (done.stdout, done.stderr)
    if command == ("backends", "--json"):
        rows = backend_rows(done)
        assert {row["status"] for row in rows.values()} == {"disabled"}
        assert {(name, None) for name in EXPECTED} <= set(rows)
    elif command == ("caps", "--format", "json"):
        assert json.loads(done.stdout)["backends"] == {}


def test_cli_strict_mode_reports_plugin_error(installed: Installed, tmp_path: Path) -> None:
    done = cli(installed, tmp_path, "backends", ALGOSWAP_STRICT_PLUGINS="1")
    assert done.returncode == 2
    assert done.stderr.startswith("algoswap: error: plugin 'a_takeover' (algoswap-test-takeover 0.1.0) is broken: "
                                  "backend 'numpy' is the reference backend, declared by algoswap-numpy")


def test_cli_strict_mode_with_failing_plugins_denied(installed: Installed, tmp_path: Path, import_log: Path) -> None:
    done = cli(installed, tmp_path, "backends", "--json", log=import_log, ALGOSWAP_STRICT_PLUGINS="1",
               ALGOSWAP_DISABLE_PLUGINS=DENY_FAILING)
    rows = backend_rows(done)
    assert {rows[(n, None)]["status"] for n in FAILING} == {"disabled"}
    assert rows[("test_good", "toy")]["status"] == "available"
    assert sorted(imported(import_log)) == ["algoswap_test_families", "algoswap_test_good", "algoswap_test_meddler"]


def test_cli_without_the_test_plugins_installed(installed: Installed, tmp_path: Path) -> None:
    rows = backend_rows(cli(installed, tmp_path, "backends", "--json", plugins=False))
    assert ("numpy", "numpy") in rows
    assert not [key for key in rows if key[0].startswith("test_") or key[1] in ("toy", "toy_offline")]


def test_cli_caps_available_with_nothing_available_says_why_and_fails(installed: Installed, tmp_path: Path) -> None:
    done = cli(installed, tmp_path, "caps", "--available", "--backend", "toy_offline")
    assert (done.returncode, done.stdout) == (1, "")
    said = done.stderr.split("algoswap caps: ", 1)[1]  # after the warnings of the broken plugins
    assert said == f"no backend matching the filters is available on this machine:\n  toy_offline: {OFFLINE}\n"


def test_cli_warns_of_names_in_the_plugin_variables_no_plugin_has(installed: Installed, tmp_path: Path) -> None:
    done = cli(installed, tmp_path, "backends", "--json", ALGOSWAP_PLUGINS="numpy,test-goood",
               ALGOSWAP_DISABLE_PLUGINS="test_broken,nope")
    assert done.returncode == 0
    warnings = [line for line in done.stderr.splitlines() if "names no installed plugin" in line]
    assert [w.split(";")[0] for w in warnings] == ["algoswap: warning: ALGOSWAP_PLUGINS names no installed plugin: test-goood",
                                                   "algoswap: warning: ALGOSWAP_DISABLE_PLUGINS names no installed plugin: nope"]
    assert all("test_good (algoswap-test-good)" in w and "numpy (algoswap-numpy)" in w for w in warnings)
    assert backend_rows(done)[("numpy", "numpy")]["status"] == "available"
