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
        "for name in ('algoswap_numpy', 'pluggy', 'torch', 'algoswap_test_good', 'algoswap._global', 'algoswap._plugins'):\n"
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
COMMANDS = [("backends",), ("backends", "--json"), ("caps",), ("caps", "--format", "json"), ("ops",), DEMO]


@pytest.mark.parametrize("command", COMMANDS[:1] + COMMANDS[2:], ids=" ".join)  # backends --json: see above
def test_cli_works_with_broken_plugins(installed: Installed, tmp_path: Path, command: tuple[str, ...]) -> None:
    done = cli(installed, tmp_path, *command)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    if command == ("backends",):
        assert "[test_broken]" in out and "broken: import failed: RuntimeError: boom at import" in out
        assert "toy_offline" in out and "unavailable: no toy device here" in out
    elif command == ("caps",):
        relu = out.split("\n\nrelu\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert relu[0].split() == ["backend", "direct"]
        rows = {line.rsplit(None, 1)[0].strip(): line.rsplit(None, 1)[1] for line in relu[1:]}
        expected = {"numpy": "✓", "toy": "✓", "toy_offline (unavailable: no toy device here)": "✓"}
        assert rows.items() >= expected.items()  # other installed backends (dnnl) may add rows
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
        assert "numpy:direct" in out and "toy_offline (unavailable: no toy device here)" in out


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
