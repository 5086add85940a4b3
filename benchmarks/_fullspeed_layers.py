"""cuda_fullspeed.py's --layers and --plot: the bfloat16 matrix-product ceiling and ResNet-50's largest
convolutions through torch and swap_conv2d, each call timed (host-bound at batch 32: a swapped layer's call
costs more host time than its kernels) and each captured as a CUDA graph and replayed (the kernels' own time)
(TFLOP/s, share of the ceiling, float64 verdict), and the bar
chart of the swap_backend ratios per configuration. Imports torch, CuPy and matplotlib only when called.
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any

from _fullspeed_ways import TARGET_OF_CEILING, TARGET_VS_COMPILE, TARGET_VS_EAGER, event_times, failure, say


# ---------------------------------------------------------------------------------------------- the largest layers


def matmul_ceiling(n: int = 8192) -> float:
    """TFLOP/s of an n^3 bfloat16 torch.matmul on random data: the mean of 10 calls after 3 warm-ups."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        torch.matmul(a, b)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        torch.matmul(a, b)
    stop.record()
    stop.synchronize()
    return 2.0 * n**3 / (start.elapsed_time(stop) / 10) / 1e9


def largest_layers(args: argparse.Namespace) -> dict[str, Any]:
    """The ceiling, then each of ResNet-50's largest convolutions: torch and each swap_conv2d request."""
    import torch

    from cuda_conv_layers import flops, resnet50_layers  # imports CuPy and algoswap_cuda: GPU machines only

    ceiling = matmul_ceiling()
    say(f"bf16 matmul ceiling: {ceiling:.0f} TFLOP/s")
    layers = resnet50_layers(args.layer_batch)
    for layer in layers:
        k, _, r, s = layer["w"]
        (_, _, h, w), (ph, pw), (sh, sw) = layer["x"], layer["padding"], layer["stride"]
        layer["y"] = (layer["x"][0], k, (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1)
        layer["flops"] = flops(layer, layer["y"])
    rows = []
    for layer in sorted(layers, key=lambda item: -item["flops"])[:args.layers_top]:
        say(f"  layer {layer['x']} * {layer['w']} /{layer['stride'][0]}: {layer['flops'] / 1e9:.1f} GFLOP")
        try:
            rows.append({**layer, "ways": _layer_ways(layer, args, ceiling)})
        except Exception as exc:  # noqa: BLE001
            rows.append({**layer, "ways": {}, **failure(exc)})
        torch.cuda.empty_cache()
    return {"ceiling_tflops": ceiling, "batch": args.layer_batch, "rows": rows}


def _layer_ways(layer: dict[str, Any], args: argparse.Namespace, ceiling: float) -> dict[str, dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    import algoswap
    from algoswap.testing._tolerance import comparison_bound, mismatch, relative_error

    k, c, r, s = layer["w"]
    conv = torch.nn.Conv2d(c, k, (r, s), layer["stride"], layer["padding"], bias=False)
    conv = conv.cuda().to(torch.bfloat16).to(memory_format=torch.channels_last).eval()
    x = torch.randn(layer["x"], device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    stride, padding, length = layer["stride"], layer["padding"], c * r * s
    with torch.no_grad():
        x64, w64 = x.double(), conv.weight.double()
        expected = F.conv2d(x64, w64, stride=stride, padding=padding)
        scale = F.conv2d(x64.abs(), w64.abs(), stride=stride, padding=padding)
        modules = {"torch": conv}
        result: dict[str, dict[str, Any]] = {}
        for request in args.layer_requests:
            try:
                modules[f"swap_conv2d {request}"] = algoswap.swap_conv2d(copy.deepcopy(conv), request)
            except Exception as exc:  # noqa: BLE001
                result[f"swap_conv2d {request}"] = failure(exc)
        for way, module in modules.items():
            try:
                out = module(x)
                problem = mismatch(out, expected, dtype="bfloat16", reduction_length=length, scale=scale)
                ms = statistics.median(event_times(lambda: module(x), args.calls * 2, args.warmup))
            except Exception as exc:  # noqa: BLE001
                result[way] = failure(exc)
                continue
            tflops = layer["flops"] / ms / 1e9
            result[way] = {"ms": ms, "tflops": tflops, "of_ceiling": tflops / ceiling, "error": relative_error(out, expected),
                           "bound": comparison_bound("bfloat16", "float64", length), "passed": not problem}
            if way != "torch":
                result[way]["target"] = "met" if tflops / ceiling >= TARGET_OF_CEILING else "missed"
        for way, (run, out) in _graph_ways(conv, x, layer, args).items():  # the kernels' own time, no host cost
            try:
                run()  # a captured graph's output holds nothing until it is replayed
                torch.cuda.synchronize()
                problem = mismatch(out(), expected, dtype="bfloat16", reduction_length=length, scale=scale)
                ms = statistics.median(event_times(run, args.calls * 2, args.warmup))
            except Exception as exc:  # noqa: BLE001
                result[way] = failure(exc)
                continue
            tflops = layer["flops"] / ms / 1e9
            result[way] = {"ms": ms, "tflops": tflops, "of_ceiling": tflops / ceiling, "error": relative_error(out(), expected),
                           "bound": comparison_bound("bfloat16", "float64", length), "passed": not problem}
            if not way.startswith("torch"):
                result[way]["target"] = "met" if tflops / ceiling >= TARGET_OF_CEILING else "missed"
    return result


def _graph_ways(conv: Any, x: Any, layer: dict[str, Any], args: argparse.Namespace) -> dict[str, tuple[Any, Any]]:
    """The layer captured once as a CUDA graph and replayed, so that only GPU time is timed: torch's module
    (torch.cuda.CUDAGraph) and each cuda implementation of --layer-requests on CuPy views of the same tensors
    (algoswap_cuda's own capture). Way -> (replay, the captured output as a torch tensor)."""
    import cupy as cp
    import torch
    from algoswap_cuda import _graphs

    import algoswap

    ways: dict[str, tuple[Any, Any]] = {}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        conv(x)  # cuDNN's plan chosen before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = conv(x)
    ways["torch (CUDA graph: GPU time)"] = (graph.replay, lambda: captured)
    ph, pw = layer["padding"]
    attrs = {"stride": tuple(layer["stride"]), "padding": ((ph, ph), (pw, pw)), "dilation": (1, 1), "groups": 1,
             "padding_mode": "zeros"}
    xc, wc = cp.from_dlpack(x), cp.from_dlpack(conv.weight.detach())
    for request in args.layer_requests:
        backend, _, algorithm = request.partition(":")
        impl = algoswap.registry().impls.get(("conv2d", algorithm, backend))
        if impl is None:
            continue
        impl.callable(xc, wc, None, **attrs)  # plans built, outside the capture
        replay = _graphs.capture(lambda _, impl=impl: [impl.callable(xc, wc, None, **attrs)], [cp.zeros(1, cp.float32)])
        ways[f"{request} kernels (CUDA graph: GPU time)"] = (
            lambda replay=replay: replay.graph.launch(cp.cuda.get_current_stream()),
            lambda replay=replay: torch.from_dlpack(replay.outputs[0]))
    return ways


# ---------------------------------------------------------------------------------------------- plot


def plot(results: dict[str, Any], path: str) -> None:
    """Bars per configuration: each swap_backend way over eager (line at 0.8) and over the faster compile mode (line at 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [row for row in results["configs"] if "ways" in row]
    labels = [f"{row['model']} {row['dtype']} b{row['batch']}" for row in rows]
    swapped = list(dict.fromkeys(way for row in rows for way in row["ways"] if way.startswith("swap_backend")))
    panels = [("vs_eager", TARGET_VS_EAGER, "time / PyTorch eager"),
              ("vs_compile", TARGET_VS_COMPILE, "time / faster torch.compile (default, reduce-overhead)")]
    figure, axes = plt.subplots(2, 1, figsize=(max(8.0, min(1.1 * len(rows) + 3, 22.0)), 8), squeeze=False)
    width = 0.8 / max(len(swapped), 1)
    for axis, (key, target, title) in zip(axes[:, 0], panels):
        for index, way in enumerate(swapped):
            heights = [row["ways"].get(way, {}).get(key, np.nan) for row in rows]
            axis.bar(np.arange(len(rows)) + index * width, heights, width, label=way)
        axis.axhline(target, color="red", linewidth=0.9, linestyle="--", label=f"target <= {target:g}x")
        if max((row["ways"].get(way, {}).get(key, 0.0) for row in rows for way in swapped), default=0.0) > 3:
            axis.set_yscale("log")
        axis.set_title(f"swap_backend {title}", fontsize=9)
        axis.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, labels, rotation=35, ha="right", fontsize=7)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot written to {path}")

