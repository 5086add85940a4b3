"""The plugin system, tested with real, installed throwaway distributions (tests/plugins/*).

Fixtures and helpers shared by test_discovery.py (in-process) and test_cli.py (subprocesses).

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


# ----------------------------------------------------------------------------- subprocess helpers


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
