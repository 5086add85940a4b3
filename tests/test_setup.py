"""The set-up (Makefile) and the packaging: a second `make` redoes nothing, a changed file redoes only its
step, `make bench` and `make docs` write only into ignored folders, and every distribution declares the LICENSE
and its README.

The Makefile is read with `make --dry-run` against a stand-in venv (VENV=<tmp>): nothing is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from helpers import HANG_SECONDS

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {"": "algoswap", "plugins/numpy_backend": "algoswap-numpy", "plugins/dnnl_backend": "algoswap-dnnl",
                 "plugins/sycl_backend": "algoswap-sycl", "plugins/cuda_backend": "algoswap-cuda",
                 "plugins/metal_backend": "algoswap-metal", "plugins/dist_backend": "algoswap-dist"}
STEPS = ["torch", "core", "numpy_backend", "dnnl_backend", "sycl_backend", "cuda_backend", "metal_backend", "dist_backend",
         "examples", "test-deps", "cupy", "cpp_plugin", "bench-deps", "docs-deps"]
ASAN_STEPS = ["venv", "package", "extension"]  # `make asan`'s, stamped in its build folder (ASAN=...)
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _set_up_venv(tmp_path: Path) -> Path:
    """A venv as `make setup-test bench docs` leaves it, for make's purposes: the interpreter and every stamp."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    for step in STEPS:
        (venv / f".stamp-{step}").touch()
    return venv


def _dry_run(venv: Path, target: str, *variables: str) -> list[str]:
    """The commands `make TARGET` would run (make's own messages left out); ``variables``: more NAME=VALUE."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under `make test`
    done = subprocess.run(["make", "--dry-run", "--no-print-directory", f"VENV={venv}", *variables, target], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.strip() and not line.startswith("make: ")]


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip " in line]


@needs_make
@pytest.mark.parametrize("target", ["setup", "setup-test"])
def test_a_second_make_installs_nothing(tmp_path: Path, target: str) -> None:
    assert _dry_run(_set_up_venv(tmp_path), target) == []


@needs_make
def test_the_demo_needs_only_the_demo_on_a_set_up_venv(tmp_path: Path) -> None:
    assert _dry_run(_set_up_venv(tmp_path), "demo") == [f"{tmp_path}/venv/bin/algoswap demo"]


@needs_make
def test_the_demo_installs_what_the_examples_import_and_no_cupy(tmp_path: Path) -> None:
    """From scratch `make demo` installs scikit-learn (examples/train_digits.py) and, no GPU being certain, no CuPy:
    the CUDA plugin alone, which loads and says why it is unavailable (tests/test_cuda.py)."""
    installs = " ".join(_installs(_dry_run(tmp_path / "venv", "demo")))
    assert "scikit-learn" in installs and "-e plugins/cuda_backend" in installs, installs
    assert "cupy" not in installs.lower() and "[cu1" not in installs, installs


@needs_make
@pytest.mark.parametrize("changed, step, redone", [
    ("plugins/dnnl_backend/src/conv.cpp", "dnnl_backend", "install -e plugins/dnnl_backend"),  # recompiles it
    ("plugins/dnnl_backend/setup.py", "dnnl_backend", "install -e plugins/dnnl_backend"),
    ("plugins/sycl_backend/pyproject.toml", "sycl_backend", "install -e plugins/sycl_backend"),
    ("pyproject.toml", "core", 'install -e ".[torch]"'),
    ("examples/cpp_plugin/src/conv.cpp", "cpp_plugin", "install ./examples/cpp_plugin"),
])
def test_a_changed_file_redoes_its_step_alone(tmp_path: Path, changed: str, step: str, redone: str) -> None:
    """A stamp older than the file it installs from, as after an edit of that file: that step alone runs again."""
    venv = _set_up_venv(tmp_path)
    before = (REPO / changed).stat().st_mtime - 10
    os.utime(venv / f".stamp-{step}", (before, before))
    installs = _installs(_dry_run(venv, "setup-test"))
    assert len(installs) == 1 and installs[0].endswith(redone), installs


def _built_asan(tmp_path: Path) -> str:
    """An ASan build folder as `make asan` leaves it (every stamp); the make variable that points at it."""
    folder = tmp_path / "asan"
    folder.mkdir()
    for step in ASAN_STEPS:
        (folder / f".stamp-{step}").touch()
    return f"ASAN={folder}"


@needs_make
def test_a_second_make_asan_only_runs_the_tests(tmp_path: Path) -> None:
    commands = _dry_run(_set_up_venv(tmp_path), "asan", _built_asan(tmp_path))
    assert len(commands) == 3 and "-m pytest" in commands[-1], commands  # the test run: one command on three lines
    assert not any(line.startswith(("g++ ", "cp ", "mkdir ", "touch ")) or " -m pip " in line or " -m venv " in line
                   for line in commands), commands


@needs_make
def test_make_asan_from_scratch_builds_everything_once(tmp_path: Path) -> None:
    commands = " ".join(_dry_run(_set_up_venv(tmp_path), "asan", f"ASAN={tmp_path / 'asan'}"))
    assert commands.count("-m venv") == 1 and commands.count("onednn-devel-cpu-gomp") == 1, commands
    assert commands.count("g++ ") == 1 and commands.count("-m pytest") == 1, commands
    assert all(f"touch {tmp_path}/asan/.stamp-{step}" in commands for step in ASAN_STEPS), commands


@needs_make
@pytest.mark.parametrize("changed, step, redone", [
    ("plugins/dnnl_backend/src/conv.cpp", "extension", "g++ "),
    ("plugins/dnnl_backend/algoswap_dnnl/conv.py", "package", "cp "),
])
def test_a_changed_file_redoes_its_asan_step_alone(tmp_path: Path, changed: str, step: str, redone: str) -> None:
    variable = _built_asan(tmp_path)
    before = (REPO / changed).stat().st_mtime - 10
    os.utime(tmp_path / "asan" / f".stamp-{step}", (before, before))
    commands = _dry_run(_set_up_venv(tmp_path), "asan", variable)
    built = [line for line in commands if line.startswith(("g++ ", "cp ", f"{tmp_path}/asan/venv/bin/python -m pip"))]
    assert len(built) == 1 and built[0].startswith(redone), commands


@needs_make
def test_bench_writes_only_into_an_ignored_folder(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    commands = [line for line in _dry_run(_set_up_venv(tmp_path), "bench") if "benchmarks/" in line]
    words = [word for line in commands for word in line.split()]
    outputs = [words[i + 1] for i, word in enumerate(words) if word in ("--plot", "--json")]
    assert len(commands) == 3 and len(outputs) == 3, commands
    for output in outputs:
        ignored = subprocess.run(["git", "check-ignore", "--quiet", "--no-index", output], cwd=REPO, timeout=HANG_SECONDS)
        assert ignored.returncode == 0, f"make bench writes {output}, which git does not ignore"


@needs_make
def test_docs_builds_strictly_into_an_ignored_folder_and_installs_pinned_mkdocs_once(tmp_path: Path) -> None:
    """`make docs` on a set-up venv only builds, warnings as errors, into a folder git ignores; from scratch it
    installs MkDocs and Material at pinned versions first."""
    lines = _dry_run(_set_up_venv(tmp_path), "docs")
    assert len(lines) == 1 and f"{tmp_path}/venv/bin/mkdocs build --strict --site-dir " in lines[0], lines
    if shutil.which("git") is not None and (REPO / ".git").exists():
        folder = lines[0].split()[-1]
        ignored = subprocess.run(["git", "check-ignore", "--quiet", "--no-index", f"{folder}/index.html"], cwd=REPO, timeout=HANG_SECONDS)
        assert ignored.returncode == 0, f"make docs writes {folder}, which git does not ignore"
    installs = " ".join(_installs(_dry_run(tmp_path / "fresh", "docs")))
    assert "mkdocs==" in installs and "mkdocs-material==" in installs, installs


@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS))
def test_every_distribution_declares_the_mit_license_file(folder: str) -> None:
    project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"], project
    assert (REPO / folder / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    assert "MIT License" in (REPO / "LICENSE").read_text()


@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS))
def test_every_distribution_is_described_by_its_readme(folder: str) -> None:
    """The PyPI description is the folder's README.md: for a plugin, its backend's page of the manual."""
    project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md" and (REPO / folder / "README.md").is_file(), project


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS.values()))
def test_the_installed_metadata_names_the_license(distribution: str) -> None:
    try:
        meta = metadata.metadata(distribution)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    assert meta["License-Expression"] == "MIT" and meta.get_all("License-File") == ["LICENSE"], dict(meta)
