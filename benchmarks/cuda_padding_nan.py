"""What the padding NaN pass costs the cuDNN convolutions (issue 12: cuDNN skips the zero-padding taps, so
a kernel after each padded forward and weight-gradient convolution puts back the NaN of 0 * inf).

For every padded conv layer of ResNet-50 (batch 32, float32, cuda:guess), in one process: the forward
and the weight gradient with the pass and with it replaced by nothing, timed in turns (GPU time per call,
CUDA events as in cuda_conv_layers.py), and with one inf weight (or grad_output) at a border. Then the
host time of one call on a tiny layer (1x64x8x8, where the host is the bottleneck), with and without, and
with a frozen finite weight (as a swap_backend Model's), for which the forward pass is not launched.

    python benchmarks/cuda_padding_nan.py [--batch 32] [--reps 20]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any, Callable, Iterator

import cupy as cp

import algoswap
import algoswap_cuda
from algoswap_cuda import conv
from cuda_conv_layers import resnet50_layers, timed

PASSES = {"forward": "_padding_nan_forward", "weight_grad": "_padding_nan_weight_grad"}


@contextlib.contextmanager
def without_pass(kind: str) -> Iterator[None]:
    """conv's NaN pass of ``kind`` replaced by nothing (conv looks it up at each call)."""
    kept = getattr(conv, PASSES[kind])
    setattr(conv, PASSES[kind], lambda *args: None)
    try:
        yield
    finally:
        setattr(conv, PASSES[kind], kept)


def _calls(layer: dict[str, Any]) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """The forward and weight-gradient calls of ``layer`` on finite data, and the same with one inf at a border."""
    registry = algoswap.registry()
    attrs = {"stride": layer["stride"], "padding": layer["padding"]}
    call = registry.spec("conv2d").bind([layer["x"], layer["w"], None], ["float32", "float32", None], attrs)
    x, w = cp.random.standard_normal(layer["x"], dtype=cp.float32), cp.random.standard_normal(layer["w"], dtype=cp.float32)
    forward, wgrad = registry.impls[("conv2d", "guess", "cuda")], registry.impls[("conv2d_grad_weight", "guess", "cuda")]
    dy = cp.random.standard_normal(call.out_shape, dtype=cp.float32)
    w_inf, dy_inf = w.copy(), dy.copy()
    w_inf[0, 0, 0, 0] = dy_inf[0, 0, 0, 0] = cp.inf
    kwargs = dict(call.attrs)
    return {"forward": (lambda: forward.callable(x, w, None, **kwargs), lambda: forward.callable(x, w_inf, None, **kwargs)),
            "weight_grad": (lambda: wgrad.callable(dy, x, weight_size=layer["w"], **kwargs),
                            lambda: wgrad.callable(dy_inf, x, weight_size=layer["w"], **kwargs))}


def _in_turns(kind: str, fn: Callable[[], float]) -> tuple[float, float]:
    """(without the pass, with it): the smaller of two measurements of each, taken in turns."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(2):
        with without_pass(kind):
            times[False].append(fn())
        times[True].append(fn())
    return min(times[False]), min(times[True])


def layers(batch: int, reps: int) -> None:
    print(f"{'layer':<34} {'pass':<12} {'without ms':>10} {'with ms':>9} {'ratio':>6} {'one inf ms':>10}")
    totals = {kind: [0.0, 0.0] for kind in PASSES}
    for layer in resnet50_layers(batch):
        if not any(layer["padding"]):
            continue
        for kind, (finite, with_inf) in _calls(layer).items():
            without, with_pass = _in_turns(kind, lambda: timed(finite, reps))
            totals[kind][0] += without * layer["count"]
            totals[kind][1] += with_pass * layer["count"]
            name = f"{layer['x']} {layer['w'][0]}x{layer['w'][2]}x{layer['w'][3]}/{layer['stride'][0]}"
            one_inf = timed(with_inf, reps)
            print(f"{name:<34} {kind:<12} {without:>10.4f} {with_pass:>9.4f} {with_pass / without:>6.3f} {one_inf:>10.4f}")
    for kind, (without, with_pass) in totals.items():
        print(f"ResNet-50's padded layers (each times its count), {kind}: {without:.3f} ms without the pass, "
              f"{with_pass:.3f} ms with it ({with_pass / without:.3f})")


def _host_us(fn: Callable[[], Any], reps: int) -> float:
    for _ in range(100):
        fn()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def host_cost(reps: int = 2000) -> None:
    layer = {"x": (1, 64, 8, 8), "w": (64, 64, 3, 3), "stride": (1, 1), "padding": (1, 1), "count": 1}
    for kind, (finite, _) in _calls(layer).items():
        without, with_pass = _in_turns(kind, lambda: _host_us(finite, reps))
        print(f"tiny layer 1x64x8x8, {kind}: {without:.1f} us a call without the pass, {with_pass:.1f} us with it")
    # a swap_backend Model's weights: the GPU copy of a frozen finite array, for which no pass is launched
    import numpy as np

    from algoswap_cuda import _runtime

    x = cp.random.standard_normal(layer["x"], dtype=cp.float32)
    w = _runtime.from_host(algoswap.freeze(np.random.default_rng(0).standard_normal(layer["w"]).astype(np.float32)))
    attrs = dict(algoswap.registry().spec("conv2d").bind([layer["x"], layer["w"], None], ["float32", "float32", None],
                                                          {"padding": layer["padding"]}).attrs)
    forward = algoswap.registry().impls[("conv2d", "guess", "cuda")].callable
    frozen = _host_us(lambda: forward(x, w, None, **attrs), reps)
    print(f"tiny layer 1x64x8x8, forward with a frozen finite weight (known finite: no pass): {frozen:.1f} us a call")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    algoswap_cuda.set_tf32(False)
    layers(args.batch, args.reps)
    host_cost()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
