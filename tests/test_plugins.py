"""The plugin system, tested with real, installed throwaway distributions (tests/plugins/*).

Five tiny distributions are pip-installed once per session into a temporary directory:

==================== ============= ================================================================
distribution         entry point   behaviour
==================== ============= ================================================================
algoswap-test-good   test_good     backends "toy" (relu "toy:direct") and "toy_offline" (its probe
                                   answers "no toy device here")
algoswap-test-broken test_broken   raises RuntimeError("boom at import") on import
algoswap-test-raising test_raising add_backend("raising") then raises inside algoswap_register
algoswap-test-clash  test_clash    declares backend "numpy", owned by the real algoswap-numpy
algoswap-test-oldapi test_oldapi   supports core API ">=2,<3" only
==================== ============= ================================================================

Every throwaway module appends its name to the file named by ``ALGOSWAP_TEST_IMPORT_LOG`` when
it is imported, so the tests can prove a plugin was (or was never) imported, even one whose
import fails (a failed import leaves no trace in ``sys.modules``).

In-process tests run a fresh ``Registry`` through ``PluginLoader`` with an explicit environment;
subprocess tests run the ``algoswap`` CLI with ``PYTHONPATH`` pointing at the install directory.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap import _global
from algoswap._plugins import ENV_ALLOW, ENV_DENY, ENV_STRICT, PluginLoader
from algoswap._registry import Registry
from algoswap._select import select

HERE = Path(__file__).resolve().parent
DISTS = HERE / "plugins"
LOG_VAR = "ALGOSWAP_TEST_IMPORT_LOG"
MODULES = ("algoswap_test_good", "algoswap_test_broken", "algoswap_test_raising", "algoswap_test_clash", "algoswap_test_oldapi")
NUMPY_OWNER = f"algoswap-numpy {importlib.metadata.version('algoswap-numpy')}"

# entry-point name -> (distribution, version, status, fragments its error must contain)
EXPECTED = {
    "numpy": ("algoswap-numpy", importlib.metadata.version("algoswap-numpy"), "loaded", ()),
    "test_good": ("algoswap-test-good", "1.2.0", "loaded", ()),
    "test_broken": ("algoswap-test-broken", "0.0.1", "broken", ("import failed", "RuntimeError: boom at import")),
    "test_raising": ("algoswap-test-raising", "0.2.0", "broken", ("ValueError: boom during registration",)),
    "test_clash": ("algoswap-test-clash", "0.3.0", "broken",
                   (f"backend 'numpy' is declared by both {NUMPY_OWNER} and algoswap-test-clash 0.3.0",)),
    "test_oldapi": ("algoswap-test-oldapi", "2.0.0", "incompatible", (">=2,<3", algoswap.API_VERSION)),
}
FAILING = [name for name, (_, _, status, _) in EXPECTED.items() if status != "loaded"]


# ----------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Installed:
    site: Path
    seconds: float


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """pip-install the five throwaway distributions, once, into a temporary target directory.

    The sources are copied first so that setuptools' build/ and *.egg-info stay out of the repo."""
    root = tmp_path_factory.mktemp("algoswap-plugins")
    sources = [shutil.copytree(path, root / "src" / path.name) for path in sorted(DISTS.iterdir()) if (path / "pyproject.toml").is_file()]
    assert len(sources) == 5, sources
    site = root / "site"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), *map(str, sources)],
        capture_output=True, text=True, env=env, cwd=root,
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        pytest.fail(f"pip install of the test plugins failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return Installed(site, seconds)


@pytest.fixture(autouse=True)
def _forget_plugin_modules() -> Any:
    """Each test imports the throwaway plugins afresh (and can check which it imported)."""
    def forget() -> None:
        for name in [m for m in sys.modules if m.startswith("algoswap_test_")]:
            del sys.modules[name]

    forget()
    yield
    forget()


@pytest.fixture
def import_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "imports.log"
    path.touch()
    monkeypatch.setenv(LOG_VAR, str(path))
    return path


def imported(log: Path) -> list[str]:
    return log.read_text().split()


@pytest.fixture
def discover(installed: Installed, monkeypatch: pytest.MonkeyPatch, import_log: Path) -> Any:
    """Run discovery into a fresh registry, the test plugins on sys.path, with exactly ``env``."""
    monkeypatch.syspath_prepend(str(installed.site))

    def run(**env: str) -> Registry:
        registry = Registry()
        PluginLoader(registry, env=env).discover()
        return registry

    return run


def plugin_records(registry: Registry) -> dict[str, Any]:
    records = {p.name: p for p in registry.plugins}
    assert len(records) == len(registry.plugins), "an entry point was recorded twice"
    return records


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def relative_error(out: Any, ref: Any) -> float:
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Stride 1, no padding, float64, independent of every backend."""
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape[2:], axis=(2, 3))
    return np.einsum("ncijhw,ochw->noij", windows, w.astype(np.float64)) + b[None, :, None, None]


# ----------------------------------------------------------------------------- in-process discovery


def test_install_is_quick(installed: Installed) -> None:
    assert sorted(p.name for p in installed.site.glob("*.dist-info")) == sorted(
        f"{EXPECTED[n][0].replace('-', '_')}-{EXPECTED[n][1]}.dist-info" for n in EXPECTED if n != "numpy")
    assert installed.seconds < 30, f"installing the test plugins took {installed.seconds:.1f} s"


def test_every_plugin_is_listed_with_its_status_and_error(discover: Any, import_log: Path) -> None:
    registry = discover()
    records = plugin_records(registry)
    for name, (distribution, version, status, fragments) in EXPECTED.items():
        record = records[name]
        assert (record.distribution, record.version, record.status) == (distribution, version, status), record
        for fragment in fragments:
            assert fragment in record.error, (name, record.error)
        if status == "loaded":
            assert record.error == "" and record.trace == ""
    assert records["test_good"].backends == ("toy", "toy_offline")
    assert records["test_good"].api_range == ">=1,<2"
    assert "boom at import" in records["test_broken"].trace
    assert "boom during registration" in records["test_raising"].trace
    # each plugin was imported, once, on its own; the broken one did not stop the others
    assert sorted(imported(import_log)) == sorted(MODULES)


def test_failed_plugins_register_nothing(discover: Any) -> None:
    registry = discover()
    records = plugin_records(registry)
    for name in FAILING:
        assert records[name].backends == (), name
    # registration is atomic: test_raising had called add_backend/add_implementation before raising
    assert "raising" not in registry.backends
    assert "oldapi" not in registry.backends
    assert not [i for i in registry.impls.values() if i.plugin in FAILING]
    assert not [u for u in registry.unsupported.values() if u.plugin in FAILING]
    # the clash did not take over the numpy backend or any of its implementations
    numpy_backend = registry.backends["numpy"]
    assert (numpy_backend.plugin, numpy_backend.distribution, numpy_backend.priority) == ("numpy", "algoswap-numpy", 0)
    assert registry.owner_of("numpy") == NUMPY_OWNER
    direct = registry.impls[("conv2d", "direct", "numpy")]
    assert direct.plugin == "numpy" and direct.callable.__module__ == "algoswap_numpy.conv"
    assert {"numpy", "toy", "toy_offline"} <= set(registry.backends)


def test_numpy_backend_still_works_next_to_failing_plugins(discover: Any, rng: np.random.Generator) -> None:
    registry = discover()
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    selection = select(registry, "conv2d", [x.shape, w.shape, b.shape], ["float32"] * 3)
    assert selection.backend.name == "numpy"
    out = selection.impl.callable(x, w, b, **selection.call.attrs)
    assert out.dtype == np.float32
    assert relative_error(out, conv2d_reference(x, w, b)) < 1e-5
    relu = select(registry, "relu", [x.shape], ["float32"])
    assert relu.impl.qualified == "numpy:direct"
    assert relative_error(relu.impl.callable(x), np.maximum(x, 0)) < 1e-7


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_toy_relu_is_selectable_and_correct(discover: Any, rng: np.random.Generator, dtype: type) -> None:
    registry = discover()
    x = rng.standard_normal((3, 5, 7)).astype(dtype)
    selection = select(registry, "relu", [x.shape], [np.dtype(dtype).name], algorithm="toy:direct")
    assert (selection.impl.qualified, selection.backend.name, selection.kernel) == ("toy:direct", "toy", "toy numpy.maximum")
    assert selection.backend.distribution == "algoswap-test-good" and selection.backend.version == "1.2.0"
    out = selection.impl.callable(x, **selection.call.attrs)
    assert out.dtype == dtype
    assert relative_error(out, np.maximum(x, 0)) <= 1e-12


def test_unavailable_backend_reports_its_reason(discover: Any) -> None:
    registry = discover()
    assert registry.backends["toy"].availability() is True
    assert registry.backends["toy_offline"].availability() == "no toy device here"
    with pytest.raises(algoswap.NoImplementationError, match="no toy device here") as error:
        select(registry, "relu", [(4, 4)], ["float32"], algorithm="toy_offline:direct")
    assert error.value.rejected == (("toy_offline:direct", "backend unavailable: no toy device here"),)
    # an unavailable backend is skipped, never chosen, by default selection
    assert select(registry, "relu", [(4, 4)], ["float32"], algorithm="direct").backend.name != "toy_offline"


@pytest.mark.parametrize("name", FAILING)
def test_strict_mode_turns_each_failure_into_plugin_error(discover: Any, name: str) -> None:
    distribution, version, status, fragments = EXPECTED[name]
    with pytest.raises(algoswap.PluginError) as error:
        discover(**{ENV_STRICT: "1", ENV_ALLOW: f"numpy,{name}"})
    message = str(error.value)
    assert f"plugin {name!r} ({distribution} {version}) is {status}" in message
    for fragment in fragments:
        assert fragment in message


def test_strict_mode_stops_at_the_first_failure(discover: Any) -> None:
    with pytest.raises(algoswap.PluginError, match="test_broken"):
        discover(**{ENV_STRICT: "1"})


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_strict_mode_off_values(discover: Any, value: str) -> None:
    records = plugin_records(discover(**{ENV_STRICT: value}))
    assert records["test_broken"].status == "broken"


def test_strict_mode_passes_when_the_failing_plugins_are_denied(discover: Any, import_log: Path) -> None:
    registry = discover(**{ENV_STRICT: "1", ENV_DENY: "test_broken,algoswap-test-raising,test_clash,algoswap_test_oldapi"})
    records = plugin_records(registry)
    assert {n: records[n].status for n in EXPECTED} == {
        "numpy": "loaded", "test_good": "loaded", **{n: "disabled" for n in FAILING}}
    assert sorted(imported(import_log)) == ["algoswap_test_good"]


@pytest.mark.parametrize("allow", [
    "test_good",  # entry-point name
    "algoswap-test-good",  # distribution name
    "Algoswap_Test.Good",  # distribution name, spelt another way (PEP 503 normalisation)
    "test_good,no-such-plugin,",
])
def test_allow_list(discover: Any, import_log: Path, rng: np.random.Generator, allow: str) -> None:
    registry = discover(**{ENV_ALLOW: allow})
    records = plugin_records(registry)
    assert records["test_good"].status == "loaded"
    for name in EXPECTED.keys() - {"test_good"}:
        assert (records[name].status, records[name].error) == ("disabled", f"not listed in {ENV_ALLOW}"), name
    assert set(registry.backends) == {"toy", "toy_offline"}
    # disabled before import: only the allowed plugin was imported
    assert imported(import_log) == ["algoswap_test_good"]
    assert "algoswap_test_broken" not in sys.modules
    x = rng.standard_normal((16,)).astype(np.float32)
    selection = select(registry, "relu", [x.shape], ["float32"])
    assert selection.impl.qualified == "toy:direct"
    assert relative_error(selection.impl.callable(x), np.maximum(x, 0)) <= 1e-12


def test_allow_list_tolerates_spaces_after_commas(discover: Any) -> None:
    records = plugin_records(discover(**{ENV_ALLOW: "numpy, test_good"}))
    assert (records["numpy"].status, records["test_good"].status) == ("loaded", "loaded")


def test_allow_list_matching_nothing_disables_everything(discover: Any, import_log: Path) -> None:
    registry = discover(**{ENV_ALLOW: "no-such-plugin"})
    assert {p.status for p in registry.plugins} == {"disabled"}
    assert set(plugin_records(registry)) >= EXPECTED.keys()
    assert registry.backends == {} and registry.impls == {}
    assert imported(import_log) == []
    with pytest.raises(algoswap.NoImplementationError, match="no implementation is registered"):
        select(registry, "relu", [(3,)], ["float32"])


@pytest.mark.parametrize("deny", ["test_broken", "algoswap-test-broken", "numpy,algoswap_test_broken"])
def test_deny_list_disables_before_import(discover: Any, import_log: Path, deny: str) -> None:
    registry = discover(**{ENV_DENY: deny})
    records = plugin_records(registry)
    assert (records["test_broken"].status, records["test_broken"].error) == ("disabled", f"listed in {ENV_DENY}")
    assert records["test_broken"].trace == ""
    assert "algoswap_test_broken" not in imported(import_log)
    assert "algoswap_test_broken" not in sys.modules
    assert records["test_good"].status == "loaded"
    assert records["test_clash"].status == ("loaded" if "numpy" in deny else "broken")
    if "numpy" in deny:  # with the real numpy backend denied, nothing clashes with test_clash
        assert registry.backends["numpy"].distribution == "algoswap-test-clash"


def test_deny_list_wins_over_allow_list(discover: Any, import_log: Path) -> None:
    records = plugin_records(discover(**{ENV_ALLOW: "test_good,test_broken", ENV_DENY: "algoswap-test-broken"}))
    assert records["test_broken"].status == "disabled"
    assert records["test_good"].status == "loaded"
    assert imported(import_log) == ["algoswap_test_good"]


def test_installing_and_removing_a_plugin_changes_the_registry(
    installed: Installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """The process-wide registry (``algoswap.reload_plugins``): install -> appears, remove -> gone."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in installed.site.glob("algoswap_test_good*"):
        shutil.copytree(entry, site / entry.name) if entry.is_dir() else shutil.copy(entry, site)
    for variable in (ENV_ALLOW, ENV_DENY, ENV_STRICT):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(_global, "_registry", None)  # restored afterwards: no leak into other tests
    monkeypatch.syspath_prepend(str(site))
    x = rng.standard_normal((5, 6)).astype(np.float32)

    registry = algoswap.reload_plugins()
    assert registry is algoswap.registry()
    assert "toy" in registry.backends
    assert [p.name for p in algoswap.plugins() if p.name.startswith("test_")] == ["test_good"]
    assert relative_error(algoswap.ops.relu(x, algorithm="toy:direct"), np.maximum(x, 0)) <= 1e-12

    shutil.rmtree(next(site.glob("algoswap_test_good-*.dist-info")))  # "pip uninstall" (the module may linger)
    importlib.invalidate_caches()
    registry = algoswap.reload_plugins()
    assert "toy" not in registry.backends and "numpy" in registry.backends
    assert not [p for p in algoswap.plugins() if p.name.startswith("test_")]
    with pytest.raises(algoswap.NoImplementationError):
        algoswap.ops.relu(x, algorithm="toy:direct")


# ----------------------------------------------------------------------------- subprocesses


def run_python(args: list[str], installed: Installed, cwd: Path, log: Path | None = None, plugins: bool = True,
               **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` in a new process: the test plugins installed (on PYTHONPATH) or not."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ALGOSWAP_") and k != "PYTHONPATH"}
    if plugins:
        full["PYTHONPATH"] = str(installed.site)
    if log is not None:
        full[LOG_VAR] = str(log)
    full.update(env)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def cli(installed: Installed, cwd: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_python(["-m", "algoswap", *args], installed, cwd, **kwargs)


def backend_rows(done: subprocess.CompletedProcess[str]) -> dict[tuple[str, str | None], dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    return {(row["plugin"], row["backend"]): row for row in document["backends"]}


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


COMMANDS = [("backends",), ("backends", "--json"), ("caps",), ("caps", "--format", "json"), ("ops",), ("demo",)]


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
        assert rows == {"numpy": "✓", "toy": "✓", "toy_offline (unavailable: no toy device here)": "✓"}
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
    elif command == ("demo",):
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
    assert done.stderr.startswith("algoswap: error: plugin 'test_broken' (algoswap-test-broken 0.0.1) is broken: import failed")


def test_cli_strict_mode_with_failing_plugins_denied(installed: Installed, tmp_path: Path, import_log: Path) -> None:
    deny = "test_broken,algoswap-test-raising,test_clash,algoswap_test_oldapi"
    done = cli(installed, tmp_path, "backends", "--json", log=import_log, ALGOSWAP_STRICT_PLUGINS="1", ALGOSWAP_DISABLE_PLUGINS=deny)
    rows = backend_rows(done)
    assert {rows[(n, None)]["status"] for n in FAILING} == {"disabled"}
    assert rows[("test_good", "toy")]["status"] == "available"
    assert imported(import_log) == ["algoswap_test_good"]


def test_cli_without_the_test_plugins_installed(installed: Installed, tmp_path: Path) -> None:
    rows = backend_rows(cli(installed, tmp_path, "backends", "--json", plugins=False))
    assert ("numpy", "numpy") in rows
    assert not [key for key in rows if key[0].startswith("test_") or key[1] in ("toy", "toy_offline")]
