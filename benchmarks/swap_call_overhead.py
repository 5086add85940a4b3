"""Host cost per call of a layer swapped by swap_conv2d / swap_operation: the core's share (the torch
bridge: selection look-up, tensor views, wishes, autograd), on the CPU.

Each swapped layer runs a trivial registered implementation (backend "trivial": it returns an output it
computed once), so the time of a swapped call is the core's work plus a function call, which is timed
apart and subtracted. Torch's own layer is shown for scale (its time includes its kernel). Three ways:
inference (torch.no_grad), a forward that records autograd (parameters requiring gradients, as in
training), and that forward plus its backward (torch.autograd.grad).

    python benchmarks/swap_call_overhead.py [--repeats 30] [--profile]

Per call: the least over ``--repeats`` rounds of the mean of 300 calls (the machine's load only adds); the
inference calls inside one ``torch.no_grad()`` block (before 2026-12-04 each call entered its own: 2-3 us more).
``--profile`` prints where a swapped conv2d call's time goes (cProfile, inference and with autograd).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import time
import types
from typing import Any, Callable

import numpy as np
import torch

import algoswap
from algoswap_numpy import conv as numpy_conv
from algoswap_numpy import linear as numpy_linear

OPS = {"conv2d": numpy_conv.conv2d_direct, "conv2d_grad_input": numpy_conv.conv2d_grad_input,
       "conv2d_grad_weight": numpy_conv.conv2d_grad_weight, "conv2d_grad_bias": numpy_conv.conv2d_grad_bias,
       "linear": numpy_linear.linear, "linear_grad_input": numpy_linear.linear_grad_input,
       "linear_grad_weight": numpy_linear.linear_grad_weight, "linear_grad_bias": numpy_linear.linear_grad_bias}
CALLS = 300


def trivial(reference: Callable[..., Any]) -> Callable[..., Any]:
    """An implementation that computes its output once (by the reference) and returns it at every call."""
    kept: list[np.ndarray] = []

    def implementation(*arrays: Any, **attrs: Any) -> np.ndarray:
        if not kept:
            kept.append(np.ascontiguousarray(reference(*arrays, **attrs)))
        return kept[0]

    return implementation


def register_trivial() -> dict[str, Callable[..., Any]]:
    functions = {op: trivial(reference) for op, reference in OPS.items()}

    def register(registry: Any) -> None:
        registry.add_backend("trivial", priority=100)
        for op, function in functions.items():
            registry.add_implementation(op, "direct", "trivial", function)

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="trivial").status == "loaded"
    return functions


def per_call_us(fn: Callable[[], Any], repeats: int, grad: bool = True) -> float:
    """The least over ``repeats`` rounds of the mean time of ``CALLS`` calls, grad mode ``grad`` around them."""
    with torch.set_grad_enabled(grad):
        for _ in range(CALLS):
            fn()
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(CALLS):
                fn()
            best = min(best, (time.perf_counter() - started) / CALLS)
    return best * 1e6


def layers() -> dict[str, tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]]:
    """op -> (torch's layer, its swapped twin, an input)."""
    torch.manual_seed(0)
    conv, linear = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Linear(16, 8)
    return {
        "conv2d": (conv, algoswap.swap_conv2d(copy.deepcopy(conv), "trivial:direct"), torch.randn(1, 8, 8, 8)),
        "linear": (linear, algoswap.swap_operation("linear", copy.deepcopy(linear), "trivial:direct"), torch.randn(4, 16)),
    }


def ways(layer: torch.nn.Module, x: torch.Tensor) -> dict[str, tuple[Callable[[], Any], bool]]:
    """way -> (one call, whether grad mode is on around the calls). Inference calls run inside one
    ``torch.no_grad()`` block, as a model's layers do (entering the block costs 2-3 us, no part of a layer's call)."""
    params = list(layer.parameters())
    x_grad = x.clone().requires_grad_(True)

    def backward() -> Any:
        out = layer(x_grad)
        return torch.autograd.grad(out, [x_grad, *params], torch.ones_like(out))

    return {"inference (no_grad)": (lambda: layer(x), False), "forward recording autograd": (lambda: layer(x_grad), True),
            "forward + backward": (backward, True)}


def implementation_us(functions: dict[str, Callable[..., Any]], op: str, x: torch.Tensor, layer: torch.nn.Module,
                      repeats: int) -> dict[str, float]:
    """The trivial implementations' own time per call (after the swapped layer's calls made their outputs),
    with the canonical attributes the core passes: the forward op, and the forward and gradient ops of a backward."""
    arrays = [x.numpy(), *(p.detach().numpy() for p in layer.parameters())]
    shapes = [a.shape for a in arrays]
    attrs = dict(algoswap.select(op, shapes, algorithm="trivial:direct", **(layer.algoswap_attr_values or {})).call.attrs)
    forward = per_call_us(lambda: functions[op](*arrays, **attrs), repeats)
    grads = [name for name in OPS if name.startswith(f"{op}_grad")]
    each = per_call_us(lambda: functions[grads[0]](arrays[0], arrays[1], **attrs), repeats)  # about as long as each
    return {"inference (no_grad)": forward, "forward recording autograd": forward,
            "forward + backward": forward + each * len(grads)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    functions = register_trivial()
    print(f"us per call (least of {args.repeats} rounds of {CALLS} calls; torch {torch.__version__}, one thread; "
          "inference calls inside one no_grad block)")
    print(f"{'layer':<8} {'way':<28} {'torch layer':>11} {'swapped':>9} {'core share':>11}")
    for op, (plain, swapped, x) in layers().items():
        torch_ways, swapped_ways = ways(plain, x), ways(swapped, x)
        times = {way: [per_call_us(fn, args.repeats, grad) for fn, grad in (torch_ways[way], swapped_ways[way])]
                 for way in torch_ways}
        own = implementation_us(functions, op, x, swapped, args.repeats)
        for way, (reference, ours) in times.items():
            print(f"{op:<8} {way:<28} {reference:11.1f} {ours:9.1f} {ours - own[way]:11.1f}")
    if args.profile:
        _, conv, x = layers()["conv2d"]
        for label, (fn, grad) in ways(conv, x).items():
            if label != "forward + backward":
                print(f"\n== profile: swapped conv2d, {label}")
                profile = cProfile.Profile()
                with torch.set_grad_enabled(grad):
                    profile.runcall(lambda: [fn() for _ in range(3000)])
                pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
