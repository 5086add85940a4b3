"""How long ``swap_backend`` takes to convert a model (trace or export, lower, fold, preselect for the sample
shape), the median of a few conversions in this process, with the tracer that made the graph.

    .venv/bin/python benchmarks/conversion_time.py torchvision:resnet50 torchvision:vit_b_16 timm:edgenext_xx_small
    .venv/bin/python benchmarks/conversion_time.py --families --repeats 1   # tests/timm_families.json, batch 2

Each model is built once; PyTorch's own forward at the same input is timed beside it, for scale, and the
converted model's relative error against it and the nodes it leaves to PyTorch are shown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

from pathlib import Path

import torch

from algoswap import swap_backend, zoo

FAMILIES = Path(__file__).resolve().parents[1] / "tests" / "timm_families.json"


def _median_seconds(function: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _models(args: argparse.Namespace) -> list[tuple[str, tuple[int, ...]]]:
    if not args.families:
        return [(name, (1, 3, args.side, args.side)) for name in args.models]
    listed = json.loads(FAMILIES.read_text())
    return [(f"timm:{entry['model']}", (2, 3, entry["side"], entry["side"])) for _, entry in sorted(listed.items())
            if entry["parameters"] <= args.max_parameters]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["torchvision:resnet50", "torchvision:vit_b_16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", type=int, default=224)
    parser.add_argument("--families", action="store_true", help="one model per timm family (tests/timm_families.json)")
    parser.add_argument("--max-parameters", type=float, default=2e8)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"{'model':<40} {'tracer':<13} {'convert s':>9} {'torch forward s':>15} {'in torch':>8} {'rel. error':>10}")
    for name, shape in _models(args):
        module = zoo.build(name)
        models = []
        seconds = _median_seconds(lambda: models.append(swap_backend(module, None, shape, fallback="torch")), args.repeats)
        x = torch.randn(shape)
        with torch.no_grad():
            forward = _median_seconds(lambda: module(x), args.repeats)
            ref = module(x)
        model = models[-1]
        error = float((model(x) - ref).norm() / ref.norm())
        left = sum(row.implementation.startswith("torch") for row in model.explain())
        print(f"{name:<40} {getattr(model, 'tracer', 'torch.fx'):<13} {seconds:>9.2f} {forward:>15.3f} {left:>8} {error:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
