"""The Metal backends against torch's own mps device, on a Mac with Apple silicon (plugins/metal_backend/verify_on_mac.sh
runs it): every distinct conv layer of ResNet-18 at 224x224 swapped with swap_conv2d to mps:mpsgraph, metal:smm and
metal:direct next to F.conv2d on mps tensors, then the whole model eager, through swap_conv2d and through
swap_backend. Each row: median milliseconds over --reps calls (torch.mps.synchronize after each) and the relative
error against torch's output. Without a Mac only --help runs (tests/test_metal.py).

    python benchmarks/metal_layers.py [--batch 1] [--reps 20] [--out metal_layers.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any, Callable

LAYER_WAYS = ("mps:mpsgraph", "metal:smm", "metal:direct")
MODEL_WAYS = ("swap_conv2d mps:mpsgraph", "swap_conv2d metal:smm", "swap_backend mps:default", "swap_backend metal:default")


def timed(fn: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    """Median milliseconds of one call of ``fn``, the GPU's work finished."""
    import torch

    for _ in range(warmup):
        fn()
    torch.mps.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.mps.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def relative_error(out: Any, ref: Any) -> float:
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def conv_layers(batch: int) -> list[tuple[str, Any, tuple[int, ...]]]:
    """(label, conv module, input shape) of each distinct conv layer of ResNet-18 at 224x224."""
    import torch

    from algoswap import zoo

    model = zoo.build("resnet18").eval()
    seen: dict[str, tuple[str, Any, tuple[int, ...]]] = {}

    def record(module: Any, inputs: tuple[Any, ...], _: Any) -> None:
        label = (f"{module.in_channels}->{module.out_channels} {inputs[0].shape[-1]}^2 {module.kernel_size[0]}x"
                 f"{module.kernel_size[1]} s{module.stride[0]}")
        seen.setdefault(label, (label, copy.deepcopy(module), (batch, *inputs[0].shape[1:])))

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(zoo.sample_input("resnet18", batch=1))
    for hook in hooks:
        hook.remove()
    return list(seen.values())


def layer_rows(batch: int, reps: int) -> list[dict[str, Any]]:
    import torch

    import algoswap

    rows = []
    for label, conv, shape in conv_layers(batch):
        conv = conv.to("mps")
        x = torch.randn(shape, device="mps")
        with torch.no_grad():
            ref = conv(x)
            row: dict[str, Any] = {"layer": label, "torch ms": timed(lambda: conv(x), reps)}
            for way in LAYER_WAYS:
                swapped = algoswap.swap_conv2d(torch.nn.Sequential(copy.deepcopy(conv)), way, sample_input_shape=shape)
                row[f"{way} ms"] = timed(lambda: swapped(x), reps)
                row[f"{way} error"] = relative_error(swapped(x), ref)
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def model_rows(batch: int, reps: int) -> list[dict[str, Any]]:
    import torch

    import algoswap
    from algoswap import zoo

    net = zoo.build("resnet18").eval().to("mps")
    x = zoo.sample_input("resnet18", batch=batch).to("mps")
    with torch.no_grad():
        ref = net(x)
        rows = [{"way": "torch eager (mps)", "ms": timed(lambda: net(x), reps), "error": 0.0}]
        for way in MODEL_WAYS:
            kind, request = way.split()
            if kind == "swap_conv2d":
                model = algoswap.swap_conv2d(copy.deepcopy(net), request, sample_input_shape=tuple(x.shape))
            else:
                model = algoswap.swap_backend(copy.deepcopy(net), request, sample_input_shape=tuple(x.shape))
            rows.append({"way": way, "ms": timed(lambda: model(x), reps), "error": relative_error(model(x), ref)})
            print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    return "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default="", help="write the rows to this JSON file")
    parser.add_argument("--skip-model", action="store_true", help="the conv layers only")
    args = parser.parse_args()
    import torch

    if not torch.backends.mps.is_available():
        raise SystemExit("torch finds no mps device: this benchmark needs a Mac with an Apple GPU")
    result = {"batch": args.batch, "torch": torch.__version__, "layers": layer_rows(args.batch, args.reps)}
    if not args.skip_model:
        result["model"] = model_rows(args.batch, args.reps)
    if args.out:
        with open(args.out, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
