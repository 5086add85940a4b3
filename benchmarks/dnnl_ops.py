"""The oneDNN backend's arithmetic, matmul, transpose, instance-norm, relu, pooling and softmax ops side by
side with the NumPy backend and PyTorch (through the registry, as users call them), float32, one run of each in turn.

    .venv/bin/python benchmarks/dnnl_ops.py
    .venv/bin/python benchmarks/dnnl_ops.py --runs 20

Median ms of timed runs after warm-up; ratios are dnnl / numpy and dnnl / torch (below 1: dnnl faster).
The last row times the extension directly on a broadcast oneDNN 3.2 runs with its reference kernel,
which the binary ops' predicates refuse (the registry does not offer it).
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import functools
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

import algoswap
from dnnl_conv_layers import median_ms

Case = tuple[str, str, tuple[tuple[int, ...], ...], dict[str, Any], Callable[..., Any]]

CASES: list[Case] = [
    ("mul", "direct", ((64, 256, 28, 28), (64, 256, 28, 28)), {}, torch.mul),
    ("mul", "direct", ((64, 256, 28, 28), (256, 1, 1)), {}, torch.mul),
    ("div", "direct", ((64, 256, 28, 28), (64, 256, 28, 28)), {}, torch.div),
    ("sqrt", "direct", ((64, 256, 28, 28),), {}, torch.sqrt),
    ("rsqrt", "direct", ((64, 256, 28, 28),), {}, torch.rsqrt),
    ("rsqrt_grad", "direct", ((64, 256, 28, 28), (64, 256, 28, 28)), {}, lambda dy, y: dy * y * y * y * -0.5),
    ("pow_scalar", "direct", ((64, 256, 28, 28),), {"exponent": 2.0}, lambda x, exponent: torch.pow(x, exponent)),
    ("pow_scalar", "direct", ((64, 256, 28, 28),), {"exponent": -1.0}, lambda x, exponent: torch.pow(x, exponent)),
    ("mul_scalar", "direct", ((64, 256, 28, 28),), {"value": 0.5}, lambda x, value: x * value),
    ("matmul", "gemm", ((1024, 1024), (1024, 1024)), {}, torch.matmul),
    ("matmul", "gemm", ((1024, 1024), (1024, 1024)), {"trans_a": True}, lambda a, b, trans_a: a.T @ b),
    ("batch_matmul", "gemm", ((64, 128, 64), (64, 64, 128)), {}, torch.matmul),
    ("batch_matmul", "gemm", ((8, 12, 128, 64), (8, 12, 128, 64)), {"trans_b": True},
     lambda a, b, trans_b: a @ b.transpose(-1, -2)),
    ("transpose", "direct", ((64, 256, 28, 28),), {"perm": (0, 2, 3, 1)},
     lambda x, perm: x.permute(*perm).contiguous()),
    ("instance_norm", "direct", ((32, 64, 56, 56), (64,), (64,)), {}, lambda x, w, b: F.instance_norm(x, weight=w, bias=b)),
    ("group_norm", "direct", ((32, 64, 56, 56), (64,), (64,)), {"num_groups": 1},
     lambda x, w, b, num_groups: F.group_norm(x, num_groups, weight=w, bias=b)),
    # ops that scan their inputs for NaN and infinity (README: the oneDNN backend)
    ("relu", "direct", ((64, 256, 28, 28),), {}, torch.relu),
    ("relu_grad", "direct", ((64, 256, 28, 28), (64, 256, 28, 28)), {}, lambda dy, x: torch.where(x > 0, dy, 0)),
    ("maxpool2d", "direct", ((32, 64, 112, 112),), {"kernel_size": 3, "stride": 2, "padding": 1},
     lambda x, kernel_size, stride, padding: F.max_pool2d(x, kernel_size, stride, padding)),
    ("softmax", "direct", ((4096, 1000),), {"axis": -1}, lambda x, axis: torch.softmax(x, axis)),
    ("log_softmax_grad", "direct", ((4096, 1000), (4096, 1000)), {"axis": -1},
     lambda dy, y, axis: dy - torch.exp(y) * dy.sum(axis, keepdim=True)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'op':<14}{'shapes':<42}{'dnnl ms':>9}{'numpy ms':>10}{'torch ms':>10}{'/numpy':>8}{'/torch':>8}  dnnl kernel")
    for op, algorithm, shapes, attrs, torch_fn in CASES:
        arrays = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes]
        tensors = [torch.from_numpy(a) for a in arrays]
        runs: dict[str, Callable[[], Any]] = {
            name: functools.partial(algoswap.ops.call, op, *arrays, algorithm=f"{name}:{algorithm}", **attrs)
            for name in ("dnnl", "numpy")}
        runs["torch"] = functools.partial(torch_fn, *tensors, **attrs)
        with torch.inference_mode():
            ms = median_ms(runs, args.runs)
        with algoswap.trace() as ran:  # type: ignore[attr-defined]
            algoswap.ops.call(op, *arrays, algorithm=f"dnnl:{algorithm}", **attrs)
        kernel = ran[0].kernel
        label = " x ".join(str(s) for s in shapes) + (f" {attrs}" if attrs else "")
        print(f"{op:<14}{label[:41]:<42}{ms['dnnl']:>9.2f}{ms['numpy']:>10.2f}{ms['torch']:>10.2f}"
              f"{ms['dnnl'] / ms['numpy']:>8.2f}{ms['dnnl'] / ms['torch']:>8.2f}  {str(kernel)[:40]}")
    reference_kernel_row(args.runs)


def reference_kernel_row(runs: int) -> None:
    """mul of (64, 256, 28, 28) by (28, 1): oneDNN's binary has only ref:any for this broadcast."""
    from algoswap_dnnl._ext import dnnl

    rng = np.random.default_rng(0)
    a, b = rng.random((64, 256, 28, 28), np.float32), rng.random((1, 1, 28, 1), np.float32)
    ms = median_ms({"dnnl": lambda: dnnl.binary(a, b, "mul"), "numpy": lambda: a * b}, runs)
    kernel = dnnl.binary_impl(list(a.shape), list(b.shape), "mul").impl
    print(f"{'mul (direct)':<14}{'(64, 256, 28, 28) x (28, 1)':<42}{ms['dnnl']:>9.2f}{ms['numpy']:>10.2f}{'':>10}"
          f"{ms['dnnl'] / ms['numpy']:>8.2f}{'':>8}  {kernel} (refused by the predicate)")


if __name__ == "__main__":
    main()
