"""Per-call cost of a tiny conv layer, where the host is the bottleneck: torch, a layer swapped by
swap_conv2d (through the torch bridge), and the implementation called on CuPy arrays; then a profile
of the swapped layer's calls (where the bridge's time goes).

    python benchmarks/cuda_call_overhead.py [--profile]
"""

from __future__ import annotations

import copy
import cProfile
import pstats
import sys
import time

import cupy as cp
import torch

import algoswap

conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
x = torch.randn(1, 64, 8, 8, device="cuda")
swapped = algoswap.swap_conv2d(copy.deepcopy(conv), "cuda:guess")
impl = algoswap.registry().impls[("conv2d", "guess", "cuda")]
xc, wc, bc = cp.from_dlpack(x), cp.from_dlpack(conv.weight.detach()), cp.from_dlpack(conv.bias.detach())
attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, padding_mode="zeros")
calls = {"torch conv": lambda: conv(x), "swapped conv (bridge)": lambda: swapped(x),
         "implementation on CuPy arrays": lambda: impl.callable(xc, wc, bc, **attrs)}
with torch.no_grad():
    for label, fn in calls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(500):
            fn()
        torch.cuda.synchronize()
        print(f"per call, tiny layer: {label}: {(time.perf_counter() - start) / 500 * 1e6:.1f} us")
    if "--profile" in sys.argv:
        profile = cProfile.Profile()
        profile.runcall(lambda: [swapped(x) for _ in range(2000)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)
