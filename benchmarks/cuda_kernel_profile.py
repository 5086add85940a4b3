"""Where a model's GPU time goes, kernel by kernel: PyTorch eager, torch.compile and swap_backend side by side
(issue 16's misses found by this: which kernels swap_backend runs that the others do not, and which of the
shared ones take longer).

    python3 benchmarks/cuda_kernel_profile.py [--models resnet50] [--batch 256] [--dtypes bfloat16 float16]
        [--ways eager compile swap find] [--top 14] [--json out.json]

Per model, dtype and way: the wall time per forward (CUDA events, median of --calls), the GPU's kernel time
per forward (torch.profiler's CUDA activity over --profiled forwards, summed) and the kernels that take most of
it, grouped by name (template arguments cut), in µs per forward and count per forward. swap_backend runs with
CUDA graphs off here (a replayed graph's kernels are not listed one by one); its wall time with them on is
given too. Eager and compile run channels_last in half precision, as in cuda_fullspeed.py.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import re
import statistics
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kernel_name(name: str) -> str:
    """A kernel's name without template arguments and parameter lists, shortened to 90 characters."""
    short = re.sub(r"<.*>", "<>", name)
    short = re.sub(r"\(.*\)", "", short)
    return short[:90]


def profile(run: Callable[[], Any], forwards: int) -> tuple[float, list[tuple[str, float, float]]]:
    """GPU kernel µs per forward in total, and per kernel name (µs per forward, launches per forward), largest first."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            run()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for event in prof.events():
        if str(getattr(event, "device_type", "")).endswith("CUDA"):
            entry = totals[kernel_name(event.name)]
            entry[0] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
            entry[1] += 1
    rows = sorted(((name, us / forwards, count / forwards) for name, (us, count) in totals.items()), key=lambda r: -r[1])
    return sum(r[1] for r in rows), rows


def wall_ms(run: Callable[[], Any], calls: int) -> float:
    from _fullspeed_ways import event_times

    return statistics.median(event_times(run, calls, warmup=3))


def ways(name: str, batch: int, dtype_name: str, wanted: list[str]) -> dict[str, Callable[[], Any]]:
    import torch

    import algoswap
    from algoswap import zoo
    from models import qualified

    dtype = getattr(torch, dtype_name)
    half = dtype_name != "float32"
    layout = torch.channels_last if half else torch.contiguous_format
    module = zoo.build(qualified(name), num_classes=1000).eval()
    x = zoo.sample_input(qualified(name), batch).cuda()
    eager = copy.deepcopy(module).cuda().to(dtype).to(memory_format=layout)
    xl = x.to(dtype).contiguous(memory_format=layout)
    made: dict[str, Callable[[], Any]] = {}
    if "eager" in wanted:
        made["eager"] = lambda: eager(xl)
    if "compile" in wanted:
        compiled = torch.compile(eager, dynamic=False)
        made["compile default"] = lambda: compiled(xl)
    for way, selector in (("swap", None), ("find", {"conv2d": "cuda:find"})):
        if way not in wanted:
            continue
        column = f"swap_backend{' cuda:find' if selector else ''}"
        xs = x.to(dtype)
        for capture in (False, True):
            model = algoswap.swap_backend(copy.deepcopy(module).cuda(), selector, tuple(x.shape), dtype=dtype, fallback="torch")
            model.capture = capture
            made[column + (" (graphs on: wall only)" if capture else "")] = (lambda m=model: m(xs))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--ways", nargs="+", default=["eager", "compile", "swap", "find"])
    parser.add_argument("--profiled", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import torch

    torch.backends.cudnn.benchmark = True
    results: list[dict[str, Any]] = []
    with torch.no_grad():
        for name in args.models:
            for dtype_name in args.dtypes:
                for way, run in ways(name, args.batch, dtype_name, args.ways).items():
                    try:
                        entry: dict[str, Any] = {"model": name, "batch": args.batch, "dtype": dtype_name, "way": way,
                                                 "wall_ms": wall_ms(run, args.calls)}
                        if "wall only" not in way:
                            entry["kernel_us"], rows = profile(run, args.profiled)
                            entry["kernels"] = [{"name": n, "us": us, "count": c} for n, us, c in rows[:40]]
                    except Exception as exc:  # noqa: BLE001 - one way's failure is printed, the others go on
                        entry = {"model": name, "batch": args.batch, "dtype": dtype_name, "way": way, "failed": repr(exc)[:300]}
                    results.append(entry)
                    print_entry(entry, args.top)
                    if args.json:
                        with open(args.json, "w") as handle:
                            json.dump(results, handle, indent=1)
    return 0


def print_entry(entry: dict[str, Any], top: int) -> None:
    head = f"== {entry['model']} b{entry['batch']} {entry['dtype']} {entry['way']}"
    if "failed" in entry:
        print(f"{head}: failed {entry['failed']}", flush=True)
        return
    kernels = f", kernels {entry['kernel_us'] / 1000:.3f} ms per forward" if "kernel_us" in entry else ""
    print(f"{head}: wall {entry['wall_ms']:.3f} ms{kernels}", flush=True)
    for row in entry.get("kernels", [])[:top]:
        print(f"   {row['us']:9.1f} us  x{row['count']:5.1f}  {row['name']}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
