"""What a backend offers (its ops, algorithms, dtypes and references) reads the same on every machine; only
whether it can run here differs. The CUDA backend is looked at where CuPy cannot be imported
(tests/without_cupy.py), where it can and its modules are imported, and as its plugin declares it: the
capability matrix is the same, and ``check-plugin`` checks its implementations from their code, without
importing them, and passes. So does the Metal plugin off a Mac."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import algoswap
from helpers import HANG_SECONDS

algoswap_cuda = pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")

WITHOUT_CUPY = [sys.executable, str(Path(__file__).with_name("without_cupy.py"))]
CUDNN = ("guess", "find", "implicit_gemm", "implicit_precomp_gemm", "gemm", "fft", "fft_tiling", "winograd_nonfused")


def _run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ALGOSWAP_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=HANG_SECONDS)


def _caps(command: list[str], tmp_path: Path) -> dict[str, Any]:
    done = _run(command, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_without_cupy_the_capability_matrix_offers_what_the_plugin_declares(tmp_path: Path) -> None:
    shown = _caps(WITHOUT_CUPY + ["caps", "--format", "json"], tmp_path)
    declared = _caps([sys.executable, "-c", "import algoswap; from algoswap._capabilities import build; "
                      "print(build(algoswap.registry(), declared=True).to_json())"], tmp_path)
    assert shown["backends"]["cuda"]["status"] == "unavailable"
    for op in ("conv2d", "conv2d_fused"):
        cells = shown["ops"][op]["backends"]["cuda"]
        for algorithm in CUDNN:
            cell = cells[algorithm]
            assert cell["supported"] and cell["reason"] is None, (op, algorithm, cell)
            assert cell["dtypes"] == sorted(algoswap_cuda.ENGINE_DTYPES.get(algorithm, algoswap_cuda.CUDNN)), (op, algorithm)
        assert {"float16", "bfloat16"} <= set(cells["guess"]["dtypes"])
    assert shown["ops"] == declared["ops"]  # every backend's offer, as declared: nothing called broken


def test_without_cupy_check_plugin_checks_the_cuda_backend_from_its_code(tmp_path: Path) -> None:
    done = _run(WITHOUT_CUPY + ["check-plugin", "cuda"], tmp_path)
    implementations = len(algoswap.registry().implementations(backend="cuda"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"  cannot run here: {implementations} implementations checked from their code, unimported"
            in done.stdout), done.stdout
    assert done.stdout.rstrip().endswith("ok: no problem found"), done.stdout


def test_with_cupy_and_the_cuda_modules_imported_the_offer_reads_the_same(tmp_path: Path) -> None:
    """The names of an imported module are asked of it; unimported, read from its code: the same answer."""
    pytest.importorskip("cupy", reason="CuPy is not installed")
    shown = _caps([sys.executable, "-c", "import sys, algoswap_cuda.conv; from algoswap._cli import main; "
                   "sys.exit(main(['caps', '--format', 'json']))"], tmp_path)
    without = _caps(WITHOUT_CUPY + ["caps", "--format", "json"], tmp_path)
    assert shown["ops"] == without["ops"]
    assert {**shown["backends"]["cuda"], "reason": None} == {**without["backends"]["cuda"], "reason": None}


@pytest.mark.parametrize("plugin", ["cuda", "metal"])
def test_check_plugin_on_a_backend_that_cannot_run_here_imports_none_of_its_modules(plugin: str, tmp_path: Path) -> None:
    code = (f"import sys, algoswap; report = algoswap.check_plugin({plugin!r}); print(report.to_text()); "
            "print(sorted(m for m, module in sys.modules.items() if module is not None and m.startswith("
            "('cupy', 'torch', 'algoswap_cuda.', 'algoswap_metal.metal.', 'algoswap_metal.mps.'))))")
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    *report, imported = done.stdout.splitlines()
    if any(line.startswith("backend ") and ": available" in line for line in report):
        pytest.skip(f"a backend of {plugin} runs here")
    assert report[-1] == "ok: no problem found", done.stdout
    assert imported == "[]", imported
