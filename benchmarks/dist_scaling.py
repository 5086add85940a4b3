"""Scaling across GPUs (issue 20): all-reduce bus bandwidth through our comm op against torch.distributed's own,
and the time per global batch of data-parallel training (the executor's DataParallel on a small CNN, and
DistributedDataParallel over ResNet-50 with swapped convolutions) for each world size, strong and weak.

    python3 benchmarks/dist_scaling.py --json $OUT/scaling.json --plot $OUT/scaling.png          # GPUs: nccl, W = 1 2 4 8
    python3 benchmarks/dist_scaling.py --backend gloo --world-sizes 1 2                         # CPU: gloo, tiny models

It starts ``torchrun --standalone --nproc-per-node W benchmarks/_dist_scaling_rank.py`` for each world size W of
``--world-sizes`` (on nccl: those the GPUs allow, one process per GPU), within ``--budget`` seconds in all: a
world size that can no longer start, and a measurement that would end past its share of the budget, is
skipped with a note. NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1, set for every process); the script refuses to run where one of them is set otherwise.

Figures (each a median after warm-up; see _dist_scaling_rank.py for the timing):
- all-reduce (float32, sum) per message size: ours, the comm op ``allreduce`` as the executor runs it (the
  nccl or gloo backend's implementation, out of place: it copies its input first), and
  ``torch.distributed.all_reduce`` in place on the same buffer; bus bandwidth = bytes / time * 2 (W-1) / W
  (0 at W = 1); ours/torch = torch's time / ours (issue 20's target: >= 0.9).
- training, per world size: the time of one step (one global batch), samples per second, efficiency
  (strong: a fixed global batch, T1 / (W * T_W); weak: a fixed batch per rank, T1 / T_W), the all-reduces
  alone (the model's float32 gradient bytes in 25 MiB buckets, all-reduced without the training step,
  over the step's time: the communication share if nothing overlapped) and the exposed communication
  ((T_W - the same step without communication) / T_W; DDP's ``no_sync`` and a plain optimizer in the executor).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _dist_scaling_rank import MULTICAST_OFF, Settings, multicast_overrides  # noqa: E402

RANK_SCRIPT = Path(__file__).resolve().parent / "_dist_scaling_rank.py"
UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}
DEFAULTS: dict[str, dict[str, Any]] = {  # per backend: what fits a GPU run of minutes, and a CPU run of seconds
    "nccl": {"sizes": ["1M", "4M", "16M", "64M", "256M", "1G"], "weak_batch": 64, "strong_batch": 256,
             "ddp_model": "resnet50", "warmup": 5, "steps": 10, "repeats": 5, "min_launch": 45.0},
    "gloo": {"sizes": ["4K", "64K", "1M"], "weak_batch": 8, "strong_batch": 16, "ddp_model": "tiny",
             "warmup": 2, "steps": 5, "repeats": 3, "min_launch": 10.0},
}


def size_in_bytes(text: str) -> int:
    """'4K', '1M', '1G' or a number of bytes (a multiple of 4: float32 elements)."""
    scale = UNITS.get(text[-1:].upper(), 1)
    value = int(float(text[:-1] if scale > 1 else text) * scale)
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError(f"{text!r}: a size of float32 elements, a multiple of 4 bytes")
    return value


def world_sizes(backend: str, wanted: list[int]) -> tuple[list[int], list[str]]:
    """The world sizes to run (ascending) and notes on those left out (on nccl, one GPU per rank)."""
    sizes = sorted(set(wanted))
    if backend != "nccl":
        return sizes, []
    import torch

    gpus = torch.cuda.device_count()
    kept = [s for s in sizes if s <= gpus]
    return kept, [f"W={s}: {gpus} GPU(s) here (one process per GPU)" for s in sizes if s > gpus]


def launch(size: int, settings: Path, env: dict[str, str], timeout: float) -> int:
    """torchrun with ``size`` ranks; its output goes straight through. Stopped after ``timeout`` seconds (and
    when this script is interrupted or terminated): -9 then."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={size}",
               str(RANK_SCRIPT), str(settings)]
    print("$ " + " ".join(command), flush=True)
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return process.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        print(f"W={size}: stopped at the end of the time budget ({timeout:.0f} s left when it started)", flush=True)
        return -9
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """End torchrun: SIGTERM first (it ends its ranks, which run in sessions of their own), SIGKILL 20 s later."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        os.killpg(process.pid, sent)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass


def _terminated(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)  # the running launch's ``finally`` ends torchrun


def run_all(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Every world size in turn, each given an equal share of what is left of the budget."""
    sizes, skipped = world_sizes(args.backend, args.world_sizes)
    end = time.monotonic() + args.budget
    runs: dict[str, Any] = {}
    launches = []
    with tempfile.TemporaryDirectory(prefix="dist_scaling_") as folder:
        for index, size in enumerate(sizes):
            left = end - time.monotonic()
            if left < args.min_launch:
                notes = [f"W={s}: not started, {max(0.0, left):.0f} s of the budget left (--min-launch {args.min_launch:g})"
                         for s in sizes[index:]]
                print("\n".join(notes), flush=True)
                skipped += notes
                break
            out = Path(folder) / f"part_{size}.json"
            share = left / (len(sizes) - index)
            settings = Settings(args.backend, args.sizes, args.weak_batch, args.strong_batch, args.ddp_model, args.warmup,
                                args.steps, args.repeats, time.time() + share - 5.0, args.timeout, str(out))
            path = Path(folder) / f"settings_{size}.json"
            path.write_text(json.dumps(asdict(settings)))
            started = time.monotonic()
            code = launch(size, path, env, left)
            launches.append({"world_size": size, "returncode": code, "seconds": time.monotonic() - started})
            if code == -9:
                skipped.append(f"W={size}: stopped at the end of the time budget (what it measured before is kept)")
            if out.exists():
                runs[str(size)] = json.loads(out.read_text())
    parts = [runs[k] for k in sorted(runs, key=int)]
    for part in parts:
        skipped += part["skipped"]
    return {"backend": args.backend, "settings": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
            "launches": launches, "skipped": skipped, "errors": [f"W={p['world_size']}: {e}" for p in parts for e in p["errors"]],
            "notes": sorted({n for p in parts for n in p["notes"]}), "device": parts[0]["device"] if parts else "",
            "allreduce": [{"world_size": p["world_size"], **row} for p in parts for row in p["allreduce"]],
            "scaling": {name: scaling(parts, name) for name in ("executor", "ddp")}}


def scaling(parts: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The rows of ``name`` ("executor" or "ddp") with throughput, efficiency against W = 1 of the same scaling
    (None without it), the share of the all-reduces alone and of the exposed communication in a step."""
    rows = [{"world_size": p["world_size"], **row} for p in parts for row in p[name]]
    for row in rows:
        base = next((r for r in rows if r["world_size"] == 1 and r["scaling"] == row["scaling"]), None)
        step, size = row["step_s"], row["world_size"]
        row["samples_per_s"] = row["global_batch"] / step
        if base is None:
            row["efficiency"] = None
        else:
            row["efficiency"] = base["step_s"] / (size * step) if row["scaling"] == "strong" else base["step_s"] / step
        row["comm_share"] = row["comm_s"] / step
        row["exposed_comm_share"] = max(0.0, step - row["local_s"]) / step
    return rows


def tables(report: dict[str, Any]) -> str:
    lines = [f"backend {report['backend']}, device {report['device']}"]
    lines += [f"note: {n}" for n in report["notes"]]
    lines += ["", "all-reduce, float32 sum: ours = the comm op (out of place), torch = torch.distributed.all_reduce (in place)",
              f"{'W':>2} {'size':>10} {'ours ms':>10} {'torch ms':>10} {'ours busbw':>11} {'torch busbw':>12} {'ours/torch':>10}"]
    for row in report["allreduce"]:
        lines.append(f"{row['world_size']:>2} {_size(row['bytes']):>10} {row['ours_s'] * 1e3:10.3f} {row['torch_s'] * 1e3:10.3f} "
                     f"{row['ours_busbw_gbs']:8.2f} GB/s {row['torch_busbw_gbs']:7.2f} GB/s {row['ours_over_torch']:10.3f}"
                     + ("" if row["correct"] else "  WRONG SUM"))
    titles = {"executor": "the executor's DataParallel, small CNN", "ddp": "DistributedDataParallel, swapped convolutions"}
    for name, rows in report["scaling"].items():
        for kind in ("weak", "strong"):
            chosen = [r for r in rows if r["scaling"] == kind]
            if not chosen:
                continue
            lines += ["", f"{titles[name]}: {kind} scaling (efficiency {'T1 / T_W' if kind == 'weak' else 'T1 / (W T_W)'})",
                      f"{'W':>2} {'rows/rank':>9} {'global':>7} {'step ms':>9} {'samples/s':>10} {'efficiency':>10} "
                      f"{'all-reduces alone':>17} {'exposed comm':>12}"]
            for r in chosen:
                efficiency = "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}"
                lines.append(f"{r['world_size']:>2} {r['per_rank']:>9} {r['global_batch']:>7} {r['step_s'] * 1e3:9.2f} "
                             f"{r['samples_per_s']:10.1f} {efficiency:>10} {r['comm_share']:16.1%} {r['exposed_comm_share']:12.1%}")
    lines += [""] + [f"skipped: {s}" for s in report["skipped"]] + [f"ERROR: {e}" for e in report["errors"]]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def plot(report: dict[str, Any], path: str) -> None:
    """Bus bandwidth against message size (ours solid, torch dashed) and efficiency against world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for size in sorted({r["world_size"] for r in report["allreduce"]} - {1}):
        rows = [r for r in report["allreduce"] if r["world_size"] == size]
        line, = left.plot([r["bytes"] for r in rows], [r["ours_busbw_gbs"] for r in rows], "o-", label=f"W={size} ours")
        left.plot([r["bytes"] for r in rows], [r["torch_busbw_gbs"] for r in rows], "x--", color=line.get_color(), label=f"W={size} torch")
    left.set(xscale="log", xlabel="message (bytes)", ylabel="bus bandwidth (GB/s)", title=f"all-reduce, {report['backend']}")
    for name, rows in report["scaling"].items():
        for kind, style in (("weak", "o-"), ("strong", "s--")):
            chosen = [r for r in rows if r["scaling"] == kind and r["efficiency"] is not None]
            if chosen:
                right.plot([r["world_size"] for r in chosen], [r["efficiency"] for r in chosen], style, label=f"{name} {kind}")
    right.axhline(0.9, color="grey", lw=0.8)
    sizes = sorted({r["world_size"] for rows in report["scaling"].values() for r in rows})
    right.set_xscale("log", base=2)
    right.set_xticks(sizes, [str(s) for s in sizes])
    top = max([1.1] + [r["efficiency"] * 1.05 for rows in report["scaling"].values() for r in rows if r["efficiency"]])
    right.set(xlabel="world size (ranks)", ylabel="efficiency", title="data-parallel training", ylim=(0, top))
    for axes in (left, right):
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl where torch sees a GPU, else gloo")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--budget", type=float, default=500.0, help="seconds for the whole run, torchrun start-ups included")
    parser.add_argument("--sizes", type=size_in_bytes, nargs="+", help="all-reduce sizes (4K, 1M, 1G, bytes)")
    parser.add_argument("--weak-batch", type=int, help="rows per rank for weak scaling")
    parser.add_argument("--strong-batch", type=int, help="rows of the global batch for strong scaling")
    parser.add_argument("--ddp-model", choices=("resnet50", "tiny"))
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--steps", type=int, help="timed steps per measurement")
    parser.add_argument("--repeats", type=int, help="timed measurements per all-reduce size")
    parser.add_argument("--min-launch", type=float, help="seconds of budget a world size needs to be started")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a collective may wait for a peer")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--plot", help="draw the figures here (PNG; needs matplotlib)")
    args = parser.parse_args(argv)
    if args.backend is None:
        import torch

        args.backend = "nccl" if torch.cuda.is_available() else "gloo"
    for key, value in DEFAULTS[args.backend].items():
        if getattr(args, key) is None:
            setattr(args, key, [size_in_bytes(s) for s in value] if key == "sizes" else value)
    return args


def main(argv: list[str] | None = None) -> int:
    overrides = multicast_overrides(os.environ)
    if overrides:
        print(f"refusing to run: NVLink multicast must stay off, but {', '.join(overrides)} "
              f"(leave them unset or set {', '.join(f'{k}={v}' for k, v in MULTICAST_OFF.items())})", file=sys.stderr)
        return 2
    args = parse(argv)
    signal.signal(signal.SIGTERM, _terminated)
    env = {**os.environ, **MULTICAST_OFF, "PYTHONUNBUFFERED": "1"}
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: the loopback interface
    if args.backend == "gloo":
        env.setdefault("OMP_NUM_THREADS", "1")
    report = run_all(args, env)
    print("\n" + tables(report), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError as exc:  # the figures are in the tables and the JSON anyway
            print(f"no plot: {exc}", file=sys.stderr)
    failed = report["errors"] or any(launch["returncode"] not in (0, -9) for launch in report["launches"])
    return 1 if failed or not report["launches"] else 0


if __name__ == "__main__":
    sys.exit(main())
