"""Plain PyTorch against swap_conv2d (each conv2d algorithm) and swap_backend, per zoo model, in one
run; and the per-call overhead a swapped layer adds over calling its implementation directly.

    .venv/bin/python benchmarks/swap_models.py                  # every zoo model, reduced inputs, batch 1
    .venv/bin/python benchmarks/swap_models.py --full --models resnet18 vgg16 --batch 8
    .venv/bin/python benchmarks/swap_models.py --plot swap.png  # also a bar chart (needs matplotlib)
    .venv/bin/python benchmarks/swap_models.py --full --models resnet18 --algorithms dnnl:direct --extra unfused bf16 torch_bf16

Target (issue 3): <= 20 us added per swapped layer call on a tiny input.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import copy
import timeit
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

import algoswap
from algoswap import zoo
from algoswap._progress import progress
from algoswap._torch.job import conv_algorithms, relative_error
from dnnl_conv_layers import median_ms as timed_in_turns  # every way timed in turns


def per_call_us(run: Callable[[], Any], number: int = 5000) -> float:
    return min(timeit.repeat(run, number=number, repeat=7)) / number * 1e6


def _noop_conv(x: np.ndarray, w: np.ndarray, b: Any, **attrs: Any) -> np.ndarray:
    return x


def _register_noop(registry: Any) -> None:
    registry.add_backend("noop", priority=-100)  # never the default choice
    registry.add_implementation("conv2d", "noop", "noop", _noop_conv)


def overhead_rows() -> list[tuple[str, float, float, float]]:
    """(layer, swapped module us, implementation called directly us, torch module us). The no-op
    conv2d isolates the swap machinery from the kernel's own run-to-run noise."""
    import types

    from algoswap_numpy import activation, conv

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=_register_noop)
    algoswap.register_plugin(plugin, name="noop")
    x = torch.randn(1, 1, 4, 4)
    conv_module, relu_module = nn.Conv2d(1, 1, 3, padding=1), nn.ReLU()
    swapped_smm = algoswap.swap_conv2d(copy.deepcopy(conv_module), "numpy:smm")
    swapped_noop = algoswap.swap_conv2d(copy.deepcopy(conv_module), "noop:noop")
    swapped_relu = algoswap.swap_operation("relu", copy.deepcopy(relu_module), "numpy:direct")
    xn, wn, bn = x.numpy(), conv_module.weight.detach().numpy(), conv_module.bias.detach().numpy()
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, padding_mode="zeros")
    with torch.no_grad():
        rows = [
            ("relu 1x1x4x4", per_call_us(lambda: swapped_relu(x)), per_call_us(lambda: activation.relu(xn)),
             per_call_us(lambda: relu_module(x))),
            ("conv2d no-op kernel", per_call_us(lambda: swapped_noop(x)), per_call_us(lambda: _noop_conv(xn, wn, bn, **attrs)),
             per_call_us(lambda: conv_module(x))),
            ("conv2d 1x1x4x4 smm", per_call_us(lambda: swapped_smm(x)), per_call_us(lambda: conv.conv2d_smm(xn, wn, bn, **attrs)),
             per_call_us(lambda: conv_module(x))),
        ]
    algoswap.reload_plugins()  # the no-op backend is for this measurement only
    return rows


def model_rows(name: str, batch: int, small: bool, repeats: int, algorithms: list[str] | None = None,
               extra: tuple[str, ...] = ()) -> list[tuple[str, str, float, float]]:
    """(model, way, ms, relative error) for torch, swap_conv2d per algorithm, and swap_backend
    (``extra``: "unfused" adds swap_backend(fuse=False), "bf16" swap_backend in bfloat16, "torch_bf16" eager in
    bfloat16, "sycl" swap_backend(model, "sycl:default"): every op on the SYCL device)."""
    model, x = zoo.build(name), zoo.sample_input(name, batch, small=small)
    runs: dict[str, Callable[[], Any]] = {"torch": lambda: model(x)}
    for algorithm in algorithms if algorithms is not None else conv_algorithms()[0]:
        swapped = algoswap.swap_conv2d(copy.deepcopy(model), algoswap.prefer(algorithm), sample_input_shape=tuple(x.shape))
        runs[f"swap_conv2d {algorithm}"] = lambda swapped=swapped: swapped(x)
    variants: dict[str, tuple[str | None, dict[str, Any]]] = {
        "default": (None, {}), "unfused": (None, {"fuse": False}), "bf16": (None, {"dtype": torch.bfloat16}),
        "sycl": ("sycl:default", {})}
    for label in ("default",) + tuple(e for e in extra if e in variants):
        algos, options = variants[label]
        converted = algoswap.swap_backend(model, algos, sample_input_shape=tuple(x.shape), **options)
        runs[f"swap_backend {label}"] = lambda converted=converted: converted(x)
    if "torch_bf16" in extra:
        low, x_low = copy.deepcopy(model).to(torch.bfloat16), x.to(torch.bfloat16)
        runs["torch bf16"] = lambda: low(x_low)
    with torch.inference_mode():
        expected = model(x)
        errors = {label: relative_error(run().float(), expected) for label, run in runs.items()}
        times = timed_in_turns(runs, repeats, warmup=1)
    return [(name, label, times[label], errors[label]) for label in runs]


def plot(rows: list[tuple[str, str, float, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r[0] for r in rows))
    ways = [w for w in dict.fromkeys(r[1] for r in rows) if w != "torch"]
    torch_ms = {r[0]: r[2] for r in rows if r[1] == "torch"}
    ratio = {(r[0], r[1]): r[2] / torch_ms[r[0]] for r in rows}
    figure, axis = plt.subplots(figsize=(max(6.0, min(len(models) * 1.6, 14.0)), 4.5))
    width = 0.8 / len(ways)
    for index, way in enumerate(ways):
        axis.bar(np.arange(len(models)) + index * width, [ratio.get((m, way), np.nan) for m in models], width, label=way)
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_yscale("log")
    many = len(models) > 8  # slanted names, so that they do not overlap
    axis.set_xticks(np.arange(len(models)) + 0.4 - width / 2, models, rotation=40 if many else 0, ha="right" if many else "center",
                    fontsize=8 if many else None)
    axis.set_ylabel("time / PyTorch eager (log)")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(zoo.MODELS), choices=zoo.MODELS)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="standard input sizes (224x224) instead of reduced ones")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", help="write a bar chart of the ratios to this PNG file")
    parser.add_argument("--algorithms", nargs="*", help="conv2d algorithms for swap_conv2d (default: every available one)")
    parser.add_argument("--skip-overhead", action="store_true", help="only the model table")
    parser.add_argument("--extra", nargs="*", default=[], choices=["unfused", "bf16", "torch_bf16", "sycl"],
                        help="also swap_backend(fuse=False), swap_backend in bfloat16, PyTorch eager in bfloat16")
    args = parser.parse_args()

    if not args.skip_overhead:
        print(f"{'swapped layer, tiny input':<22} {'swapped us':>11} {'direct us':>10} {'added us':>9} {'torch us':>9}")
        for layer, swapped, direct, plain in overhead_rows():
            print(f"{layer:<22} {swapped:11.1f} {direct:10.1f} {swapped - direct:9.1f} {plain:9.1f}")
    rows = []
    for name in progress(args.models, "benchmarking models"):
        rows += model_rows(name, args.batch, not args.full, args.repeats, args.algorithms, tuple(args.extra))
    torch_ms = {r[0]: r[2] for r in rows if r[1] == "torch"}
    print(f"\n{'model':<11} {'way':<28} {'ms':>9} {'vs torch':>9} {'rel. error':>11}")
    for name, way, ms, error in rows:
        print(f"{name:<11} {way:<28} {ms:9.1f} {ms / torch_ms[name]:8.2f}x {error:11.1e}")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
