"""Every distinct conv layer of zoo resnet18 (224x224): the SYCL backend's "sycl:direct" and "sycl:smm"
against the oneDNN backend's "dnnl:direct" and torch.nn.functional.conv2d, in one run.

    .venv/bin/python benchmarks/sycl_conv_layers.py
    .venv/bin/python benchmarks/sycl_conv_layers.py --batch 1 8 --runs 20 [--plot docs/sycl_conv_layers.png]
    ALGOSWAP_SYCL_DEVICE=opencl:cpu:0 .venv/bin/python benchmarks/sycl_conv_layers.py

Each layer is swapped with swap_conv2d (as users call it: CPU tensors in and out, copied into USM per
call). Median of timed runs after warm-up, taken in turns of --block calls of one way in a row: each
runtime's worker threads spin for a while after a call (OpenMP's for GOMP_SPINCOUNT, the TBB workers of
the OpenCL runtime) and slow whatever other runtime runs next on these 2 cores (sycl:direct right after
dnnl:direct took 1.5x its time on the 512->512 layer), while in a model one backend runs layer after
layer. Target: the best SYCL algorithm's time <= 2x dnnl's.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import functools
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

import algoswap
from dnnl_conv_layers import measure

ALGORITHMS = ("dnnl:direct", "sycl:direct", "sycl:smm")
RESIDENT = "sycl:direct in USM"


def resident(layer: nn.Conv2d, x: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """sycl:direct on arrays already in USM, as a swap_backend Model keeps them between SYCL steps: the
    kernels' share of the swapped layer's time (which also copies input and weight into USM every call)."""
    from algoswap_sycl import USM

    inputs = [None if t is None else t.detach().numpy() for t in (x, layer.weight, layer.bias)]
    attrs = {"stride": layer.stride, "padding": layer.padding, "dilation": layer.dilation, "groups": layer.groups}
    chosen = algoswap.select("conv2d", [None if a is None else a.shape for a in inputs], algorithm="sycl:direct", **attrs)
    arrays = [None if a is None else USM.upload(a) for a in inputs]
    run = functools.partial(chosen.impl.callable, *arrays, **chosen.call.attrs)
    want = torch.nn.functional.conv2d(x, layer.weight, layer.bias, **attrs).numpy()  # type: ignore[arg-type]
    np.testing.assert_allclose(USM.download(run()), want, rtol=1e-3, atol=1e-3)
    return {RESIDENT: run}


HEADER = (f"{'N':>2} {'layer':<24} {'GFLOP':>6} {'torch':>7} {'dnnl':>7} {'direct':>7} {'smm':>7}"
          f" {'direct/dnnl':>12} {'smm/dnnl':>9} {'best/dnnl':>10} {'best GFLOP/s':>13} {'in USM':>7} {'/dnnl':>6}   (ms)")


def _format(row: dict[str, Any]) -> str:
    dnnl, direct, smm = row["dnnl:direct"], row["sycl:direct"], row["sycl:smm"]
    best = min(direct, smm)
    return (f"{row['batch']:>2} {row['layer']:<24} {row['gflop']:>6.3f} {row['torch']:>7.2f} {dnnl:>7.2f} "
            f"{direct:>7.2f} {smm:>7.2f} {direct / dnnl:>12.2f} {smm / dnnl:>9.2f} {best / dnnl:>10.2f}"
            f" {row['gflop'] / best * 1e3:>13.0f} {row[RESIDENT]:>7.2f} {row[RESIDENT] / dnnl:>6.2f}")


def summary(rows: list[dict[str, Any]]) -> str:
    lines = []
    for batch in sorted({r["batch"] for r in rows}):
        mine = [r for r in rows if r["batch"] == batch]
        total = {name: sum(r[name] for r in mine) for name in ("torch",) + ALGORITHMS}
        lines.append(f"batch {batch}, all distinct layers: torch {total['torch']:.2f} ms, "
                     + ", ".join(f"{a} {total[a]:.2f} ms" for a in ALGORITHMS)
                     + f"; sycl:direct/dnnl {total['sycl:direct'] / total['dnnl:direct']:.2f}x,"
                     + f" sycl:smm/dnnl {total['sycl:smm'] / total['dnnl:direct']:.2f}x")
        best = [min(r["sycl:direct"], r["sycl:smm"]) / r["dnnl:direct"] for r in mine]
        lines.append(f"  best SYCL algorithm per layer / dnnl: {min(best):.2f}x to {max(best):.2f}x;"
                     f" layers within 2x: {sum(b <= 2 for b in best)} of {len(best)}")
        usm = [r[RESIDENT] / r["dnnl:direct"] for r in mine]
        lines.append(f"  {RESIDENT} / dnnl: {min(usm):.2f}x to {max(usm):.2f}x, sum"
                     f" {sum(r[RESIDENT] for r in mine) / total['dnnl:direct']:.2f}x; within 2x: {sum(u <= 2 for u in usm)} of {len(usm)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per measurement (after 3 warm-up runs)")
    parser.add_argument("--block", type=int, default=5, help="calls of one way in a row per turn")
    parser.add_argument("--plot", default="", help="write a per-layer chart of the ratios to this PNG file")
    args = parser.parse_args()
    sycl = algoswap.registry().backends["sycl"]
    if sycl.availability() is not True:
        raise SystemExit(f"the sycl backend is unavailable: {sycl.availability()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; SYCL device: {sycl.device}")
    print(HEADER)
    rows = [row for batch in args.batch for row in measure(batch, args.runs, ALGORITHMS, _format, args.block, resident)]
    print(summary(rows))
    if args.plot:
        plot(rows, args.plot)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Per layer and batch: each SYCL way and torch over dnnl:direct, against the 2x target."""
    from layer_plot import ratio_panels

    panels = []
    for batch in sorted({r["batch"] for r in rows}):
        mine = [r for r in rows if r["batch"] == batch]
        series: dict[str, list[float | None]] = {
            name: [r[name] / r["dnnl:direct"] for r in mine] for name in ("sycl:direct", "sycl:smm", RESIDENT, "torch")}
        panels.append((f"ResNet-18 conv layers, batch {batch}: time / dnnl:direct (swapped layers, CPU tensors in and out)",
                       [r["layer"] for r in mine], series))
    ratio_panels(panels, path, "time / dnnl:direct", target=2.0)


if __name__ == "__main__":
    main()
