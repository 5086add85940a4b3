"""The example C++ plugin (examples/cpp_plugin, "cppconv:direct") against "dnnl:direct" and "numpy:smm" (and
torch.nn.functional.conv2d) on every distinct conv layer of zoo resnet18, swapped layers timed in turns.

    .venv/bin/python benchmarks/cpp_plugin_conv.py               # batch 1 and 8
    .venv/bin/python benchmarks/cpp_plugin_conv.py --batch 1 --runs 30

Needs the example installed (make setup-test does it: pip install ./examples/cpp_plugin).
Median of timed runs after warm-up, same input, torch.inference_mode; ratios are time / cppconv's time.
"""

from __future__ import annotations

import os
from typing import Any

from dnnl_conv_layers import batch_totals, layer_arguments, measure, sgemm_peak_gflops  # sets GOMP_SPINCOUNT first

import torch

MINE = "cppconv:direct"
OTHERS = ("dnnl:direct", "numpy:smm")
ALGORITHMS = (MINE, *OTHERS)
HEADER = (f"{'N':>2} {'layer':<24} {'GFLOP':>6} {'cppconv ms':>10} {'dnnl ms':>8} {'smm ms':>8} {'torch ms':>8} "
          f"{'dnnl/cpp':>8} {'smm/cpp':>8} {'torch/cpp':>9} {'cpp GFLOP/s':>11}")


def show(row: dict[str, Any]) -> str:
    mine = row[MINE]
    return (f"{row['batch']:>2} {row['layer']:<24} {row['gflop']:>6.3f} {mine:>10.3f} {row['dnnl:direct']:>8.3f} "
            f"{row['numpy:smm']:>8.3f} {row['torch']:>8.3f} {row['dnnl:direct'] / mine:>8.2f} "
            f"{row['numpy:smm'] / mine:>8.2f} {row['torch'] / mine:>9.2f} {row['gflop'] / mine * 1e3:>11.0f}")


def summary(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"batch {batch}, all distinct layers: {MINE} {total[MINE]:.2f} ms, "
                     + ", ".join(f"{name} {total[name]:.2f} ms ({total[name] / total[MINE]:.2f}x)" for name in (*OTHERS, "torch"))
                     for batch, total in batch_totals(rows, ("torch",) + ALGORITHMS).items())


def main() -> None:
    args = layer_arguments(__doc__)
    peaks = sgemm_peak_gflops()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}; "
          f"2048x2048 sgemm: numpy {peaks['numpy']:.0f}, torch {peaks['torch']:.0f} GFLOP/s")
    print(HEADER)
    rows = [row for batch in args.batch for row in measure(batch, args.runs, ALGORITHMS, show)]
    print(summary(rows))
    print("kernels: " + "; ".join(sorted({r[f'{MINE} kernel'] for r in rows})))


if __name__ == "__main__":
    main()
