"""Memory as input shapes vary: RSS and cache entries every few hundred calls, each call with an input
shape not seen before, for three programs (each in a fresh process):

  (a) a tiny swap_backend Model (conv2d 1->2 3x3, relu, flatten), 10,000 distinct input shapes;
  (b) a swap_backend Model of one 256->256 3x3 conv2d, a few hundred distinct input sizes;
  (c) algoswap.ops.conv2d on tiny arrays, 10,000 distinct input shapes.

Every cache is bounded (algoswap.cache_limits()), so RSS should level off once the caches are full.

    .venv/bin/python benchmarks/cache_memory.py                        # the three, a table
    .venv/bin/python benchmarks/cache_memory.py --plot docs/cache_memory.png
    .venv/bin/python benchmarks/cache_memory.py --scenarios b --request numpy:default
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

SCENARIOS = {
    "a": "tiny swap_backend Model, 10,000 shapes",
    "b": "Model of one 256->256 3x3 conv2d, 400 sizes",
    "c": "ops.conv2d, 10,000 shapes",
}


def rss_mb() -> float:
    """This process's resident set size (Linux: /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (this benchmark reads Linux's)")


def shapes(count: int, low: int = 4) -> Iterator[tuple[int, int]]:
    """``count`` distinct (h, w) sizes, small first."""
    side = 1
    while side * side < count:
        side += 1
    for index in range(count):
        yield (low + index // side, low + index % side)


def _entries(model: Any = None) -> dict[str, int]:
    import algoswap

    cache, kinds = algoswap.registry().selection_cache, algoswap.cache_limits()
    counts = {"selections": len(cache), **{name: len(cache.prepared(kinds[name])) for name in ("ops_calls", "torch_calls")}}
    if model is not None:
        counts["graph_programs"] = len(model.executor.programs)
    return counts


def _model_calls(module: Any, channels: int, count: int, request: str) -> tuple[Callable[[int], None], Callable[[], dict[str, int]]]:
    import algoswap
    import torch

    model = algoswap.swap_backend(module.eval(), request)
    sizes = list(shapes(count))

    def call(index: int) -> None:
        h, w = sizes[index]
        with torch.no_grad():
            model(torch.randn(1, channels, h, w))

    return call, lambda: _entries(model)


def scenario(name: str, request: str) -> tuple[int, int, Callable[[int], None], Callable[[], dict[str, int]]]:
    """(calls, report every, the call with index i, the cache entry counts)."""
    import numpy as np
    import torch
    from torch import nn

    import algoswap

    torch.manual_seed(0)
    if name == "a":
        module = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten())
        return (10_000, 500, *_model_calls(module, 1, 10_000, request))
    if name == "b":
        return (400, 25, *_model_calls(nn.Sequential(nn.Conv2d(256, 256, 3, padding=1)), 256, 400, request))
    weight = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    sizes = list(shapes(10_000))

    def call(index: int) -> None:
        algoswap.ops.conv2d(np.ones((1, 1, *sizes[index]), np.float32), weight, None, padding=1, algorithm=request)

    return 10_000, 500, call, _entries


def measure(name: str, request: str) -> list[dict[str, Any]]:
    calls, every, call, entries = scenario(name, request)
    rows = [{"calls": 0, "rss_mb": rss_mb(), **entries()}]
    for index in range(calls):
        call(index)
        if (index + 1) % every == 0:
            rows.append({"calls": index + 1, "rss_mb": rss_mb(), **entries()})
    return rows


def run_fresh(name: str, request: str) -> list[dict[str, Any]]:
    """``measure`` in a new Python process (so that each program's RSS starts from its own)."""
    command = [sys.executable, __file__, "--child", name, "--request", request]
    return list(json.loads(subprocess.check_output(command, text=True)))


def print_table(name: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n({name}) {SCENARIOS[name]}")
    columns = [key for key in rows[0] if key not in ("calls", "rss_mb")]
    print(f"{'calls':>7} {'RSS MB':>8} {'+MB':>7} " + " ".join(f"{c:>12}" for c in columns))
    for row in rows:
        grown = row["rss_mb"] - rows[0]["rss_mb"]
        print(f"{row['calls']:>7} {row['rss_mb']:8.1f} {grown:7.1f} " + " ".join(f"{row[c]:>12}" for c in columns))


def plot(results: dict[str, list[dict[str, Any]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.6), squeeze=False)
    for axis, (name, rows) in zip(axes[0], results.items()):
        axis.plot([r["calls"] for r in rows], [r["rss_mb"] for r in rows], marker=".")
        axis.set_title(f"({name}) {SCENARIOS[name]}", fontsize=9)
        axis.set_xlabel("calls (each with a new input shape)")
        axis.set_ylabel("RSS (MB)")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="abc", help="which programs to measure (letters of a, b, c)")
    parser.add_argument("--request", default="default", help="the algorithm request of every op (e.g. numpy:default)")
    parser.add_argument("--plot", help="also draw RSS against calls to this PNG file (needs matplotlib)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.request)))
        return
    import algoswap

    limits = ", ".join(f"{kind.name}={kind.size}" for kind in algoswap.cache_limits().values())
    print(f"cache limits (entries per cache): {limits}")
    results = {name: run_fresh(name, args.request) for name in args.scenarios}
    for name, rows in results.items():
        print_table(name, rows)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
