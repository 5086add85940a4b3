"""What the bound on brgemm convolutions with an activation post-op costs (dnnl_brgemm_eltwise, issue 33): swapped
ResNet-18 on dnnl:default, batch 1, with its convolutions made as usual (brgemm, activation fused) and with the
bound at 0 (every such convolution made without its activation, which runs after it in place), each in a fresh
process, the two alternated.

    .venv/bin/python benchmarks/dnnl_brgemm_eltwise.py                       # 64, 128 and 224 pixels, 2 rounds
    .venv/bin/python benchmarks/dnnl_brgemm_eltwise.py --sides 64 --rounds 3

Median of 30 runs after 3 warm-up runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import statistics
import subprocess
import sys
import time

WAYS = {"brgemm, activation fused": {}, "activation apart": {"ALGOSWAP_CACHE_DNNL_BRGEMM_ELTWISE": "0"}}


def median_ms(side: int) -> float:
    import torch

    import algoswap

    torch.manual_seed(0)
    model = algoswap.swap_backend(algoswap.zoo.build("resnet18").eval(), "dnnl:default")
    x = torch.randn(1, 3, side, side)
    times = []
    with torch.no_grad():
        for run in range(33):
            start = time.perf_counter()
            model(x)
            if run >= 3:
                times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sides", type=int, nargs="+", default=[64, 128, 224])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(median_ms(args.child))
        return
    for side in args.sides:
        found: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way, env in WAYS.items():
                command = [sys.executable, __file__, "--child", str(side)]
                found[way].append(float(subprocess.check_output(command, text=True, env={**os.environ, **env})))
        fused = statistics.mean(found["brgemm, activation fused"])
        cells = ", ".join(f"{way} {statistics.mean(ms):.2f} ms ({statistics.mean(ms) / fused - 1:+.0%})" for way, ms in found.items())
        print(f"{side}x{side}: {cells}")


if __name__ == "__main__":
    main()
