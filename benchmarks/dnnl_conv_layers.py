"""Every distinct conv layer of zoo resnet18: torch.nn.functional.conv2d against the layer swapped to
"dnnl:direct" and "dnnl:auto" (through the registry, as users call it), batch 1 and 8, 224x224.

    .venv/bin/python benchmarks/dnnl_conv_layers.py
    .venv/bin/python benchmarks/dnnl_conv_layers.py --batch 1 --runs 50

Median of timed runs after warm-up, same input, torch.inference_mode. Target: ratio <= 1.0.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import copy
import functools
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import algoswap
from algoswap import zoo

ALGORITHMS = ("dnnl:direct", "dnnl:auto")


def median_ms(runs: dict[str, Callable[[], Any]], count: int, warmup: int = 3, block: int = 1) -> dict[str, float]:
    """Median time of each callable over ``count`` timed calls; they run in turns, so that load elsewhere
    hits them alike, ``block`` calls of one in a row per turn (see sycl_conv_layers.py for why)."""
    return {name: statistics.median(t) for name, t in times_in_turns_ms(runs, count, warmup, block).items()}


def times_in_turns_ms(runs: dict[str, Callable[[], Any]], count: int, warmup: int = 3, block: int = 1) -> dict[str, list[float]]:
    """Every timed call's milliseconds, per callable, timed in turns as ``median_ms`` describes."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(-(-count // block)):
        for name, run in runs.items():
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - start) * 1e3)
    return times


def sgemm_peak_gflops(n: int = 2048) -> dict[str, float]:
    """The machine's practical float32 peak: the best of a few n x n matrix products, numpy (BLAS) and torch."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    t = torch.from_numpy(a)
    best = {"numpy": float("inf"), "torch": float("inf")}
    for _ in range(7):
        for name, run in (("numpy", lambda: a @ a), ("torch", lambda: t @ t)):
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: 2 * n**3 / seconds / 1e9 for name, seconds in best.items()}


def distinct_layers(batch: int) -> list[tuple[nn.Conv2d, tuple[int, ...]]]:
    """(layer, input shape) for each distinct conv geometry of resnet18, in forward order."""
    model = zoo.build("resnet18")
    seen: dict[tuple[Any, ...], tuple[nn.Conv2d, tuple[int, ...]]] = {}

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        assert isinstance(module, nn.Conv2d)
        shape = tuple(args[0].shape)
        key = (shape, module.out_channels, module.kernel_size, module.stride, module.padding, module.groups)
        seen.setdefault(key, (module, shape))

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.inference_mode():
        model(zoo.sample_input("resnet18", batch))
    for handle in handles:
        handle.remove()
    return list(seen.values())


def gflop(layer: nn.Conv2d, shape: tuple[int, ...], out: torch.Tensor) -> float:
    per_output = 2 * layer.in_channels // layer.groups * layer.kernel_size[0] * layer.kernel_size[1]
    return per_output * out.numel() / 1e9


Extra = Callable[[nn.Conv2d, torch.Tensor], dict[str, Callable[[], Any]]]


def measure(batch: int, runs: int, algorithms: tuple[str, ...] = ALGORITHMS,
            show: Callable[[dict[str, Any]], str] | None = None, block: int = 1,
            extra: Extra | None = None) -> list[dict[str, Any]]:
    """One row per distinct layer: torch and each of ``algorithms`` (swapped layers), plus the calls
    ``extra(layer, input)`` makes, all timed in the same turns; printed by ``show``."""
    rows = []
    for layer, shape in distinct_layers(batch):
        x = torch.randn(shape)
        w, b = layer.weight.detach(), None if layer.bias is None else layer.bias.detach()
        row: dict[str, Any] = {"batch": batch, "layer": _describe(layer, shape)}
        with torch.inference_mode():
            y = F.conv2d(x, w, b, layer.stride, layer.padding, layer.dilation, layer.groups)
            row["gflop"] = gflop(layer, shape, y)
            calls: dict[str, Callable[[], Any]] = {
                "torch": lambda: F.conv2d(x, w, b, layer.stride, layer.padding, layer.dilation, layer.groups)}
            for algorithm in algorithms:
                swapped = algoswap.swap_conv2d(copy.deepcopy(layer), algorithm, sample_input_shape=shape)
                assert torch.allclose(swapped(x), y, rtol=1e-3, atol=1e-3)
                calls[algorithm] = functools.partial(swapped, x)
                row[f"{algorithm} kernel"] = algoswap.explain(swapped)[0].kernel
            calls.update(extra(layer, x) if extra else {})
            row.update(median_ms(calls, runs, block=block))
        rows.append(row)
        print((show or _format)(row), flush=True)
    return rows


def _describe(layer: nn.Conv2d, shape: tuple[int, ...]) -> str:
    k, s = layer.kernel_size, layer.stride
    return f"{shape[1]:>3}->{layer.out_channels:<3} {shape[2]:>3}x{shape[3]:<3} k{k[0]}x{k[1]} s{s[0]}"


HEADER = (f"{'N':>2} {'layer':<24} {'GFLOP':>6} {'torch ms':>9} {'direct ms':>10} {'auto ms':>9} "
          f"{'direct/torch':>13} {'auto/torch':>11}  kernel (dnnl:direct)")


def _format(row: dict[str, Any]) -> str:
    direct, auto, ref = row["dnnl:direct"], row["dnnl:auto"], row["torch"]
    return (f"{row['batch']:>2} {row['layer']:<24} {row['gflop']:>6.3f} {ref:>9.3f} {direct:>10.3f} {auto:>9.3f} "
            f"{direct / ref:>13.2f} {auto / ref:>11.2f}  {row['dnnl:direct kernel']}")


def summary(rows: list[dict[str, Any]], peaks: dict[str, float], top: int = 3) -> str:
    peak = max(peaks.values())
    lines = [f"\nmachine peak, 2048x2048 sgemm: numpy {peaks['numpy']:.0f}, torch {peaks['torch']:.0f} GFLOP/s"]
    for batch, total in batch_totals(rows, ("torch",) + ALGORITHMS).items():
        mine = [r for r in rows if r["batch"] == batch]
        lines.append(f"batch {batch}: all distinct layers, torch {total['torch']:.2f} ms, "
                     + ", ".join(f"{a} {total[a]:.2f} ms ({total[a] / total['torch']:.2f}x)" for a in ALGORITHMS))
        for r in sorted(mine, key=lambda r: -r["gflop"])[:top]:
            rates = {name: r["gflop"] / r[name] * 1e3 for name in ("torch",) + ALGORITHMS}
            lines.append(f"  {r['layer']:<24} torch {rates['torch']:.0f}, dnnl:direct {rates['dnnl:direct']:.0f}, "
                         f"dnnl:auto {rates['dnnl:auto']:.0f} GFLOP/s ({rates['dnnl:direct'] / peak:.0%} of peak)")
    return "\n".join(lines)


def batch_totals(rows: list[dict[str, Any]], names: tuple[str, ...]) -> dict[int, dict[str, float]]:
    """Per batch size, in order: the milliseconds of each of ``names`` summed over that batch's rows (layers)."""
    return {batch: {name: sum(r[name] for r in rows if r["batch"] == batch) for name in names}
            for batch in sorted({r["batch"] for r in rows})}


def layer_arguments(doc: str | None) -> argparse.Namespace:
    """--batch and --runs, for the scripts that time the distinct conv layers."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per measurement (after 3 warm-up runs)")
    return parser.parse_args()


def main() -> None:
    args = layer_arguments(__doc__)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}")
    peaks = sgemm_peak_gflops()
    print(HEADER)
    rows = [row for batch in args.batch for row in measure(batch, args.runs)]
    print(summary(rows, peaks))


if __name__ == "__main__":
    main()
