"""Where float16 convolutions should give infinity, what they give (issue 16; needs a CUDA GPU).

For three of ResNet-50's convolutions, in float16: one input with a +inf planted in it, and one finite input
scaled so that some outputs overflow float16's range (the float64 result above 65504 rounds to inf). Compared
with the float64 convolution of the same values rounded to float16 (the exact float16 answer): PyTorch eager
(channels_last, cudnn.benchmark off and on) and algoswap's cuda conv2d (guess and find: plans probed for the
infinities they keep, _exact.keeps_infinities), with the plan each ran.
Per column: of the outputs that are +-inf in the exact answer, how many are +-inf, how many NaN and how many
finite (with the largest magnitude among those); and whether NaN agrees. Prints a table; ``--json`` keeps it.

    python3 benchmarks/cuda_float16_infinities.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

LAYERS = {  # name: (input shape, weight shape, stride, padding)
    "conv1 7x7/2": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "layer1 3x3": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "layer3 1x1": ((8, 1024, 14, 14), (256, 1024, 1, 1), 1, 0),
}


def _inputs(shape: tuple[int, ...], weight: tuple[int, ...], case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal(shape).astype(np.float16)
    w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(np.float16)
    if case == "planted +inf":
        x[0, 0, shape[2] // 2, shape[3] // 2] = np.inf
    else:  # overflow: finite inputs scaled so that the largest outputs pass 65504
        x = np.clip(x.astype(np.float32) * 20000.0, -60000.0, 60000.0).astype(np.float16)
    return x, w


def _exact(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    import torch

    out = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=stride, padding=padding)
    with np.errstate(over="ignore"):  # rounded once to float16: an overflow is inf, which is the point
        return out.numpy().astype(np.float16).astype(np.float64)


def _torch(x: np.ndarray, w: np.ndarray, stride: int, padding: int, benchmark: bool) -> np.ndarray:
    import torch

    torch.backends.cudnn.benchmark = benchmark
    xs = torch.from_numpy(x).cuda().to(memory_format=torch.channels_last)
    ws = torch.from_numpy(w).cuda().to(memory_format=torch.channels_last)
    with torch.no_grad():
        out = torch.nn.functional.conv2d(xs, ws, stride=stride, padding=padding)
    return out.float().cpu().numpy().astype(np.float64)


def _ours(x: np.ndarray, w: np.ndarray, stride: int, padding: int, algorithm: str) -> np.ndarray:
    import algoswap

    out = algoswap.ops.call("conv2d", x, w, None, algorithm=algorithm, transfer=True, stride=stride, padding=padding)
    kernel = algoswap.select("conv2d", [x.shape, w.shape, None], dtype="float16", algorithm=algorithm, memory="cuda",
                             stride=stride, padding=padding).kernel
    print(f"    {algorithm}: {kernel}")
    return np.asarray(out).astype(np.float64)


def _judge(out: np.ndarray, exact: np.ndarray) -> dict[str, Any]:
    infinite = np.isinf(exact)
    lost = infinite & np.isfinite(out)
    return {"inf_expected": int(infinite.sum()), "inf_kept": int((infinite & (out == exact)).sum()),
            "nan_instead": int((infinite & np.isnan(out)).sum()), "finite_instead": int(lost.sum()),
            "largest_finite_instead": float(np.abs(out[lost]).max()) if lost.any() else None,
            "nan_agrees": bool(np.array_equal(np.isnan(out), np.isnan(exact)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the table's numbers here")
    args = parser.parse_args()
    ways = {"torch eager": lambda *a: _torch(*a, benchmark=False), "torch eager, cudnn.benchmark": lambda *a: _torch(*a, benchmark=True),
            "algoswap cuda:guess": lambda *a: _ours(*a, "cuda:guess"), "algoswap cuda:find": lambda *a: _ours(*a, "cuda:find")}
    rows, rng = [], np.random.default_rng(16)
    print(f"{'layer':<13} {'case':<13} {'way':<29} {'inf due':>8} {'kept':>6} {'NaN':>5} {'finite':>7} {'largest':>9} NaN agrees")
    for layer, (shape, weight, stride, padding) in LAYERS.items():
        for case in ("planted +inf", "overflow"):
            x, w = _inputs(shape, weight, case, rng)
            exact = _exact(x, w, stride, padding)
            for way, run in ways.items():
                row = {"layer": layer, "case": case, "way": way, **_judge(run(x, w, stride, padding), exact)}
                rows.append(row)
                largest = "-" if row["largest_finite_instead"] is None else f"{row['largest_finite_instead']:.0f}"
                print(f"{layer:<13} {case:<13} {way:<29} {row['inf_expected']:>8} {row['inf_kept']:>6} {row['nan_instead']:>5} "
                      f"{row['finite_instead']:>7} {largest:>9} {row['nan_agrees']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
