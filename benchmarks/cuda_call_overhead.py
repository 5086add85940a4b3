"""Per-call cost of a tiny conv layer, where the host is the bottleneck: torch, a layer swapped by
swap_conv2d (through the torch bridge), and the implementation called on CuPy arrays, in float32 (NCHW, TF32
as torch has it, on by default) and in bfloat16 channels-last (as half-precision models run); then the pieces of
the bridge timed alone (the DLPack imports each way, torch's own import of a result beside ours) and, with --profile, where the swapped layer's time goes.

    python benchmarks/cuda_call_overhead.py [--profile]
"""

from __future__ import annotations

import copy
import cProfile
import pstats
import sys
import time
from typing import Any, Callable

import cupy as cp
import torch

import algoswap

CALLS = 500


def per_call(fn: Callable[[], Any]) -> float:
    """Microseconds per call of ``fn``, back to back after a warm-up (host-bound: the GPU work is tiny)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def layer(dtype: torch.dtype, channels_last: bool) -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    """torch's tiny conv layer, its swapped copy and an input."""
    memory = torch.channels_last if channels_last else torch.contiguous_format
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().to(dtype=dtype, memory_format=memory)
    x = torch.randn(1, 64, 8, 8, device="cuda", dtype=dtype).to(memory_format=memory)
    return conv, algoswap.swap_conv2d(copy.deepcopy(conv), "cuda:guess"), x


def measure(dtype: torch.dtype, channels_last: bool, profile: bool) -> None:
    conv, swapped, x = layer(dtype, channels_last)
    impl = algoswap.registry().impls[("conv2d", "guess", "cuda")]
    xc, wc, bc = (cp.from_dlpack(t.detach()) for t in (x, conv.weight, conv.bias))
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, padding_mode="zeros")
    y = impl.callable(xc, wc, bc, **attrs)
    from algoswap._torch.tensors import device_tensor
    from algoswap_cuda import _runtime

    calls = {"torch conv": lambda: conv(x), "swapped conv (bridge)": lambda: swapped(x),
             "implementation on CuPy arrays": lambda: impl.callable(xc, wc, bc, **attrs),
             "  torch -> CuPy (_runtime.from_dlpack)": lambda: _runtime.from_dlpack(x),
             "  CuPy -> torch (torch.utils.dlpack.from_dlpack)": lambda: torch.utils.dlpack.from_dlpack(y),
             "  CuPy -> torch (algoswap's device_tensor, as the bridge imports results)": lambda: device_tensor(y)}
    name = f"{str(dtype).removeprefix('torch.')} {'channels-last' if channels_last else 'NCHW'}"
    with torch.no_grad():
        for label, fn in calls.items():
            print(f"per call, tiny layer, {name}: {label}: {per_call(fn):.1f} us")
        print(algoswap.explain(swapped))
        if profile:
            stats = cProfile.Profile()
            stats.runcall(lambda: [swapped(x) for _ in range(2000)])
            pstats.Stats(stats).sort_stats("tottime").print_stats(40)


def main() -> None:
    for dtype, channels_last in ((torch.float32, False), (torch.bfloat16, True)):
        measure(dtype, channels_last, "--profile" in sys.argv)


if __name__ == "__main__":
    main()
