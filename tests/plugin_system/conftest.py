"""The plugin system, tested with real, installed throwaway distributions (tests/plugins/*).

Fixtures and helpers shared by test_discovery.py (in-process) and test_cli.py (subprocesses).

Ten tiny distributions are pip-installed once per session into a temporary directory:

===================== ============= ==========================================================
distribution          entry point   behaviour
===================== ============= ==========================================================
algoswap-test-good    test_good     backends "toy" (relu "toy:direct") and "toy_offline" (its
                                    probe answers "no toy device here")
algoswap-test-broken  test_broken   raises RuntimeError("boom at import") on import
algoswap-test-raising test_raising  add_backend("raising") then raises inside algoswap_register
algoswap-test-clash   test_clash    declares backend "numpy", the reference backend's name
algoswap-test-takeover a_takeover   the same, from an entry point that sorts before "numpy"
algoswap-test-rival-a rival_a       declares backend "rival" ...
algoswap-test-rival-b rival_b       ... which this one declares too: neither gets it
algoswap-test-meddler test_meddler  tries to rewrite others' records through its registrar
algoswap-test-oldapi  test_oldapi   supports core API ">=2,<3" only
algoswap-test-families test_families backend "fam": the activation family from a module it never
                                    imports (relu, relu_grad; the rest missing), and two
                                    references that do not resolve
===================== ============= ==========================================================

An eleventh, algoswap-test-hazards (entry points hazard_segfault, hazard_exit, hazard_sleep,
hazard_baseexc), is installed into a directory of its own (fixture ``hazards``): its plugins crash,
end, hang or raise a BaseException, and are only ever loaded in child processes.

New plugins are checked in a child process before discovery imports them (``algoswap._quarantine``);
the verdicts are kept in the record of ``ALGOSWAP_CACHE_DIR`` that tests/conftest.py sets for the
machine. The ten are checked once, when installed, so that no test sees a check import them.

Every throwaway module appends its name to the file named by ``ALGOSWAP_TEST_IMPORT_LOG`` when
it is imported, so the tests can prove a plugin was (or was never) imported, even one whose
import fails (a failed import leaves no trace in ``sys.modules``).

In-process tests run a fresh ``Registry`` through ``PluginLoader`` with an explicit environment;
subprocess tests run the ``algoswap`` CLI with ``PYTHONPATH`` pointing at the install directory.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import algoswap
from algoswap._plugins import PluginLoader
from algoswap._registry import Registry

HERE = Path(__file__).resolve().parent
DISTS = HERE.parent / "plugins"  # tests/plugins: the throwaway distributions
LOG_VAR = "ALGOSWAP_TEST_IMPORT_LOG"
HAZARDS = "algoswap-test-hazards"
CACHE = "ALGOSWAP_CACHE_DIR"  # where the verdicts of plugin checks are kept: tests/conftest.py sets it
MODULES = ("algoswap_test_good", "algoswap_test_broken", "algoswap_test_raising", "algoswap_test_clash",
           "algoswap_test_takeover", "algoswap_test_rival_a", "algoswap_test_rival_b", "algoswap_test_meddler",
           "algoswap_test_oldapi", "algoswap_test_families")
NUMPY_OWNER = f"algoswap-numpy {importlib.metadata.version('algoswap-numpy')}"
RESERVED = f"backend 'numpy' is the reference backend, declared by {NUMPY_OWNER}; {{}} may not declare it"

# entry-point name -> (distribution, version, status, fragments its error must contain)
EXPECTED = {
    "numpy": ("algoswap-numpy", importlib.metadata.version("algoswap-numpy"), "loaded", ()),
    "test_good": ("algoswap-test-good", "1.2.0", "loaded", ()),
    "test_broken": ("algoswap-test-broken", "0.0.1", "broken", ("import failed", "RuntimeError: boom at import")),
    "test_raising": ("algoswap-test-raising", "0.2.0", "broken", ("ValueError: boom during registration",)),
    "test_clash": ("algoswap-test-clash", "0.3.0", "broken", (RESERVED.format("algoswap-test-clash 0.3.0"),)),
    "a_takeover": ("algoswap-test-takeover", "0.1.0", "broken", (RESERVED.format("algoswap-test-takeover 0.1.0"),)),
    "rival_a": ("algoswap-test-rival-a", "0.1.0", "broken",
                ("backend 'rival' is also declared by algoswap-test-rival-b 0.2.0: a name several plugins declare goes to none",)),
    "rival_b": ("algoswap-test-rival-b", "0.2.0", "broken",
                ("backend 'rival' is also declared by algoswap-test-rival-a 0.1.0: a name several plugins declare goes to none",)),
    "test_meddler": ("algoswap-test-meddler", "0.1.0", "loaded", ()),
    "test_oldapi": ("algoswap-test-oldapi", "2.0.0", "incompatible", (">=2,<3", algoswap.API_VERSION)),
    "test_families": ("algoswap-test-families", "0.1.0", "loaded", ()),
}
FAILING = [name for name, (_, _, status, _) in EXPECTED.items() if status != "loaded"]
DENY_FAILING = "test_broken,algoswap-test-raising,test_clash,algoswap_test_oldapi,a_takeover,rival_a,algoswap-test-rival-b"


# ----------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Installed:
    site: Path
    seconds: float


def _pip_install_copies(root: Path, sources: list[Path], site: Path) -> float:
    """pip-install copies of ``sources`` into the target ``site`` (so that setuptools' build/ and
    *.egg-info stay out of the repo); returns the seconds it took."""
    copies = [shutil.copytree(path, root / "src" / path.name) for path in sources]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), *map(str, copies)],
        capture_output=True, text=True, env=env, cwd=root,
    )
    if done.returncode:
        pytest.fail(f"pip install of the test plugins failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - started


def _distributions() -> list[Path]:
    return [path for path in sorted(DISTS.iterdir()) if (path / "pyproject.toml").is_file()]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """pip-install the throwaway distributions (all but the hazards), once, into a temporary target directory."""
    root = tmp_path_factory.mktemp("algoswap-plugins")
    sources = [path for path in _distributions() if path.name != HAZARDS]
    assert len(sources) == len(MODULES), sources
    seconds = _pip_install_copies(root, sources, root / "site")
    done = run_python(["-c", "import algoswap; algoswap.registry()"], Installed(root / "site", seconds), root)
    assert done.returncode == 0, done.stderr
    return Installed(root / "site", seconds)


@pytest.fixture(scope="session")
def hazards(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """pip-install algoswap-test-hazards, once, into a target directory of its own."""
    root = tmp_path_factory.mktemp("algoswap-hazards")
    seconds = _pip_install_copies(root, [DISTS / HAZARDS], root / "site")
    return Installed(root / "site", seconds)


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
def discover(installed: Installed, monkeypatch: pytest.MonkeyPatch, import_log: Path, tmp_path: Path) -> Any:
    """Run discovery into a fresh registry, the test plugins on sys.path, with exactly ``env`` (and a
    state directory of the test's own)."""
    monkeypatch.syspath_prepend(str(installed.site))
    state = tmp_path / "state"

    def run(**env: str) -> Registry:
        registry = Registry()
        PluginLoader(registry, env={"ALGOSWAP_STATE_DIR": str(state), **env}).discover()
        return registry

    return run


def plugin_records(registry: Registry) -> dict[str, Any]:
    records = {p.name: p for p in registry.plugins}
    assert len(records) == len(registry.plugins), "an entry point was recorded twice"
    return records


# ----------------------------------------------------------------------------- subprocess helpers


class Ran(subprocess.CompletedProcess[str]):
    """A finished child process, and its pid (crash reports name it)."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str, pid: int) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.pid = pid


def run_python(args: list[str], installed: Installed, cwd: Path, log: Path | None = None, plugins: bool = True,
               **env: str) -> Ran:
    """Run ``python <args>`` in a new process: the test plugins installed (on PYTHONPATH) or not; a
    state directory of its own (under ``cwd``) unless ``ALGOSWAP_STATE_DIR`` is given; the machine's record of
    plugin checks unless ``ALGOSWAP_CACHE_DIR`` is given."""
    full = {k: v for k, v in os.environ.items() if (not k.startswith("ALGOSWAP_") or k == CACHE) and k != "PYTHONPATH"}
    inherited = os.environ.get("PYTHONPATH", "")  # a checkout's own core and plugins, where it sets one
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(installed.site) if plugins else "", inherited]))
    if log is not None:
        full[LOG_VAR] = str(log)
    full["ALGOSWAP_STATE_DIR"] = str(cwd / "state")  # never the user's own
    full.update(env)
    command = [sys.executable, *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=cwd) as child:
        try:
            out, err = child.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
    done = Ran(command, child.returncode, out, err, child.pid)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def cli(installed: Installed, cwd: Path, *args: str, **kwargs: Any) -> Ran:
    return run_python(["-m", "algoswap", *args], installed, cwd, **kwargs)


def backend_rows(done: subprocess.CompletedProcess[str]) -> dict[tuple[str, str | None], dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    return {(row["plugin"], row["backend"]): row for row in document["backends"]}
