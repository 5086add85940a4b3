"""The process's memory as input shapes vary: RSS (the whole process, not the caches' own counts) every few hundred
calls, each call with an input shape not seen before, per program and per CPU backend, each in a fresh process.

  tiny      issue 33's model, swap_backend(nn.Sequential(nn.Conv2d(2, 3, 1), nn.ReLU())), inputs
            (1, 2, 1 + i % 100, 1 + i // 100): 11,000 distinct shapes
  resnet18  algoswap.zoo.build("resnet18") swapped, inputs (1, 3, 32 + i % 64, 32 + i // 64): 3,000 resolutions
            (each new one plans ResNet-18's layers anew: 7 minutes on dnnl:default, 2 cores; --shapes for fewer)
  ops       algoswap.ops.conv2d on (1, 1, h, w) arrays: 11,000 distinct shapes

Every cache is bounded (algoswap.cache_limits()), so RSS levels off once they are full: the figure to read is the
growth after the first 1,000 shapes (the last row's RSS less the row at 1,000).

    .venv/bin/python benchmarks/cache_memory.py                                  # every program, every backend
    .venv/bin/python benchmarks/cache_memory.py --plot docs/cache_memory.png --json docs/cache_memory.json
    .venv/bin/python benchmarks/cache_memory.py --programs tiny --requests numpy:default --shapes 3000
    .venv/bin/python benchmarks/cache_memory.py --replot tiny.json resnet18.json --plot docs/cache_memory.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

PROGRAMS = {"tiny": (11_000, 500), "resnet18": (3_000, 100), "ops": (11_000, 500)}  # shapes, a row every
REQUESTS = ("default", "numpy:default", "dnnl:default", "sycl:default")
FROM = 1_000  # the growth reported is the RSS after this many shapes to the end


def rss_mb() -> float:
    """This process's resident set size (Linux: /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (this benchmark reads Linux's)")


def entries(model: Any = None) -> dict[str, int]:
    """What the bounded caches hold now (the oneDNN backend's only once it is loaded)."""
    import algoswap

    counts = {"selections": len(algoswap.registry().selection_cache)}
    if model is not None:
        counts["programs"] = len(model.executor.programs)
    dnnl = sys.modules.get("algoswap_dnnl._ext")
    if dnnl is not None:
        ext = dnnl.dnnl  # type: ignore[attr-defined]
        counts["dnnl_plans"] = ext.cache_size()
        if hasattr(ext, "brgemm_eltwise_made"):  # not before issue 33
            counts["brgemm_eltwise"] = ext.brgemm_eltwise_made()
        counts["idle_MiB"] = ext.pooled_idle_bytes() >> 20
    return counts


def program(name: str, request: str) -> tuple[Callable[[int], None], Callable[[], dict[str, int]]]:
    """(the call with input shape number i, the cache entry counts)."""
    import numpy as np
    import torch
    from torch import nn

    import algoswap

    torch.manual_seed(0)
    if name == "ops":
        weight = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)

        def conv(i: int) -> None:
            algoswap.ops.conv2d(np.ones((1, 1, 1 + i % 100, 1 + i // 100), np.float32), weight, None, padding=1,
                                algorithm=request)

        return conv, entries
    if name == "tiny":
        module, channels, shape = nn.Sequential(nn.Conv2d(2, 3, 1), nn.ReLU()), 2, lambda i: (1 + i % 100, 1 + i // 100)
    else:
        module, channels, shape = algoswap.zoo.build("resnet18"), 3, lambda i: (32 + i % 64, 32 + i // 64)
    model = algoswap.swap_backend(module.eval(), request)

    def call(i: int) -> None:
        with torch.no_grad():
            model(torch.randn(1, channels, *shape(i)))

    return call, lambda: entries(model)


def measure(name: str, request: str, shapes: int) -> list[dict[str, Any]]:
    every = PROGRAMS[name][1]
    call, counts = program(name, request)
    rows = [{"shapes": 0, "rss_mb": rss_mb(), **counts()}]
    for i in range(shapes):
        call(i)
        if (i + 1) % every == 0 or i + 1 == shapes:
            rows.append({"shapes": i + 1, "rss_mb": rss_mb(), **counts()})
    return rows


def run_fresh(name: str, request: str, shapes: int) -> list[dict[str, Any]]:
    """``measure`` in a new Python process (each program's RSS starts from its own)."""
    command = [sys.executable, __file__, "--child", name, "--requests", request, "--shapes", str(shapes)]
    return list(json.loads(subprocess.check_output(command, text=True)))


def growth(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(RSS grown by FROM shapes, RSS grown from FROM shapes to the last row), in MB."""
    start = rows[0]["rss_mb"]
    at = next((r["rss_mb"] for r in rows if r["shapes"] >= FROM), rows[-1]["rss_mb"])
    return at - start, rows[-1]["rss_mb"] - at


def print_table(name: str, request: str, rows: list[dict[str, Any]]) -> None:
    first, after = growth(rows)
    print(f"\n{name}, {request}: {first:+.0f} MB by {FROM:,} shapes, then {after:+.0f} MB to {rows[-1]['shapes']:,}")
    columns = [key for key in rows[-1] if key not in ("shapes", "rss_mb")]
    print(f"{'shapes':>7} {'RSS MB':>8} {'+MB':>7} " + " ".join(f"{c:>14}" for c in columns))
    for row in rows:
        grown = row["rss_mb"] - rows[0]["rss_mb"]
        print(f"{row['shapes']:>7} {row['rss_mb']:8.1f} {grown:7.1f} " + " ".join(f"{row.get(c, ''):>14}" for c in columns))


def plot(results: dict[str, dict[str, list[dict[str, Any]]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(4.4 * len(results), 3.4), squeeze=False)
    for axis, (name, by_request) in zip(axes[0], results.items()):
        for request, rows in by_request.items():
            start = rows[0]["rss_mb"]
            color = f"C{REQUESTS.index(request)}" if request in REQUESTS else None  # one color per request
            axis.plot([r["shapes"] for r in rows], [r["rss_mb"] - start for r in rows], label=request, color=color)
        axis.axvline(FROM, color="grey", linewidth=0.6, linestyle=":")
        axis.set_title(f"{name}: up to {max(rows[-1]['shapes'] for rows in by_request.values()):,} input shapes", fontsize=9)
        axis.set_xlabel("distinct input shapes so far", fontsize=8)
        axis.set_ylabel("RSS grown (MB)", fontsize=8)
        axis.axhline(0, color="grey", linewidth=0.6)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="center right")  # one legend: every panel has the same requests
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    print(f"plot written to {path}")


def merged(paths: list[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The rows of several --json files, as one."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for path in paths:
        for name, by_request in json.loads(Path(path).read_text()).items():
            results.setdefault(name, {}).update(by_request)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="which programs (comma-separated)")
    parser.add_argument("--requests", default=",".join(REQUESTS), help="the request of every op, one run each")
    parser.add_argument("--shapes", type=int, help="distinct input shapes per run (default: the program's)")
    parser.add_argument("--plot", help="also draw RSS against shapes to this PNG file (needs matplotlib)")
    parser.add_argument("--json", help="also write every row to this JSON file")
    parser.add_argument("--replot", nargs="+", metavar="JSON", help="draw --plot from files written by --json (runs nothing)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replot:
        plot(merged(args.replot), args.plot or "cache_memory.png")
        return
    if args.child:
        print(json.dumps(measure(args.child, args.requests, args.shapes or PROGRAMS[args.child][0])))
        return
    import algoswap

    limits = ", ".join(f"{kind.name}={kind.size}" for kind in algoswap.cache_limits().values())
    print(f"cache limits (core; the plugins' are declared when they load): {limits}")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in args.programs.split(","):
        for request in args.requests.split(","):
            rows = run_fresh(name, request, args.shapes or PROGRAMS[name][0])
            results.setdefault(name, {})[request] = rows
            print_table(name, request, rows)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
