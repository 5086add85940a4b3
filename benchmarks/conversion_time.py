"""How long ``swap_backend`` takes to convert a model (trace or export, lower, fold, preselect for the sample
shape), the median of a few conversions in this process, with the tracer that made the graph.

    .venv/bin/python benchmarks/conversion_time.py torchvision:resnet50 torchvision:vit_b_16 timm:edgenext_xx_small

Each model is built once; PyTorch's own forward at the same input is timed beside it, for scale.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from algoswap import swap_backend, zoo


def _median_seconds(function: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["torchvision:resnet50", "torchvision:vit_b_16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", type=int, default=224)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"{'model':<34} {'tracer':<13} {'convert s':>9} {'torch forward s':>15}")
    for name in args.models:
        module = zoo.build(name)
        shape = (1, 3, args.side, args.side)
        models = []
        seconds = _median_seconds(lambda: models.append(swap_backend(module, None, shape, fallback="torch")), args.repeats)
        x = torch.randn(shape)
        with torch.no_grad():
            forward = _median_seconds(lambda: module(x), args.repeats)
        print(f"{name:<34} {getattr(models[-1], 'tracer', 'torch.fx'):<13} {seconds:>9.2f} {forward:>15.3f}", flush=True)


if __name__ == "__main__":
    main()
