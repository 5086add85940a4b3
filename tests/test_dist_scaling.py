"""benchmarks/dist_scaling.py (issue 20): the scaling run works end to end on gloo at world sizes 1 and 2 (tiny
models, a few steps) and reports every figure, positive and finite; efficiencies follow their formulas; a
setting that would turn NVLink multicast on is refused. The timings' values are not checked."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "dist_scaling.py"
LAUNCH_SECONDS = 240  # the run is killed then and fails
TINY = ["--backend", "gloo", "--world-sizes", "1", "2", "--sizes", "4K", "64K", "--weak-batch", "2", "--strong-batch", "4",
        "--warmup", "1", "--steps", "2", "--repeats", "2", "--timeout", "60", "--budget", "200"]

sys.path.insert(0, str(SCRIPT.parent))
import dist_scaling  # noqa: E402


def _launchable() -> str:
    try:
        import torch.distributed as torch_dist
    except ImportError:
        return "torch is not installed"
    if not torch_dist.is_available() or not torch_dist.is_gloo_available():
        return "this torch has no gloo"
    import algoswap

    return "" if "gloo" in algoswap.registry().backends else "algoswap-dist is not installed (pip install -e plugins/dist_backend)"


def _run(arguments: list[str], **env: str) -> tuple[int, str]:
    """The script's exit code and output; its whole process group is ended after LAUNCH_SECONDS."""
    environment = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    process = subprocess.Popen([sys.executable, str(SCRIPT), *arguments], env={**environment, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=LAUNCH_SECONDS)
    except subprocess.TimeoutExpired:
        output = f"still running after {LAUNCH_SECONDS} s: stopped"
    finally:
        for sent in (signal.SIGTERM, signal.SIGKILL):  # SIGTERM: the script ends its torchrun and ranks first
            if process.poll() is None:
                os.killpg(process.pid, sent)
                try:
                    process.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    pass
    return process.returncode, output


def _positive(value: Any, name: str) -> None:
    assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, f"{name}: {value!r}"


@pytest.mark.skipif(bool(_launchable()), reason=_launchable() or "launchable")
def test_gloo_at_one_and_two_ranks_reports_every_figure(tmp_path: Path) -> None:
    code, output = _run([*TINY, "--json", str(tmp_path / "report.json")], GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    assert code == 0, output[-6000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["backend"] == "gloo" and not report["errors"] and not report["skipped"], output[-6000:]
    assert [(launch["world_size"], launch["returncode"]) for launch in report["launches"]] == [(1, 0), (2, 0)]
    assert [(r["world_size"], r["bytes"]) for r in report["allreduce"]] == [(1, 4096), (1, 65536), (2, 4096), (2, 65536)]
    for row in report["allreduce"]:
        assert row["correct"], row
        for key in ("ours_s", "torch_s", "ours_over_torch"):
            _positive(row[key], key)
        for key in ("ours_busbw_gbs", "torch_busbw_gbs"):
            if row["world_size"] > 1:  # 0 at W = 1: nothing crosses a bus
                _positive(row[key], key)
    for name in ("executor", "ddp"):
        rows = report["scaling"][name]
        assert sorted((r["world_size"], r["scaling"], r["per_rank"]) for r in rows) == [
            (1, "strong", 4), (1, "weak", 2), (2, "strong", 2), (2, "weak", 2)], rows
        for row in rows:
            for key in ("step_s", "local_s", "comm_s", "samples_per_s", "efficiency", "comm_share", "parameter_bytes"):
                _positive(row[key], f"{name} {key}")
            assert 0 <= row["exposed_comm_share"] < 1, row
    started = "NVLink multicast off: the ranks were started with NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1"
    assert started in report["notes"], report["notes"]
    assert "all-reduce, float32 sum" in output and "strong scaling" in output and "weak scaling" in output


def test_efficiency_is_t1_over_w_tw_for_strong_and_t1_over_tw_for_weak() -> None:
    def part(size: int, rows: list[tuple[str, int, float]]) -> dict[str, Any]:
        made = [{"scaling": s, "per_rank": n, "global_batch": n * size, "step_s": t, "local_s": t / 2, "comm_s": t / 4}
                for s, n, t in rows]
        return {"world_size": size, "executor": made}

    parts = [part(1, [("weak", 8, 1.0), ("strong", 16, 2.0)]), part(4, [("weak", 8, 1.25), ("strong", 4, 1.0)])]
    rows = {(r["world_size"], r["scaling"]): r for r in dist_scaling.scaling(parts, "executor")}
    assert rows[4, "weak"]["efficiency"] == 0.8 and rows[4, "strong"]["efficiency"] == 0.5
    assert rows[4, "weak"]["samples_per_s"] == 32 / 1.25 and rows[4, "strong"]["comm_share"] == 0.25
    assert rows[4, "strong"]["exposed_comm_share"] == 0.5
    assert dist_scaling.scaling([part(2, [("weak", 8, 1.0)])], "executor")[0]["efficiency"] is None  # no W = 1 run


@pytest.mark.parametrize("name, value", [("NCCL_NVLS_ENABLE", "1"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"),
                                         ("NVSHMEM_DISABLE_NVLS", "")])
def test_a_setting_that_turns_nvlink_multicast_on_is_refused(name: str, value: str) -> None:
    code, output = _run([*TINY, "--budget", "1"], **{name: value})
    assert code == 2 and f"{name}={value}" in output and "multicast must stay off" in output, output
    assert "torch.distributed.run" not in output  # nothing was started


def test_world_sizes_on_gpus_are_capped_by_the_gpus_present(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert dist_scaling.world_sizes("nccl", [8, 1, 2, 4, 2]) == ([1, 2], ["W=4: 2 GPU(s) here (one process per GPU)",
                                                                          "W=8: 2 GPU(s) here (one process per GPU)"])
    assert dist_scaling.world_sizes("gloo", [2, 1]) == ([1, 2], [])
