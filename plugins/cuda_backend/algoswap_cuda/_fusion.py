"""Which plan serves a forward convolution on tensor cores (half precision, float32 with TF32: conv.on_tensor_cores)
with something after it (bias, residual, activation):
its fused cuDNN graph (one kernel), or the plain convolution's plan followed by our epilogue pass (_epilogue).

- ``guess`` takes the fused graph where one builds, except for grouped (depthwise) convolutions: for their fused
  graphs cuDNN's heuristics rank first an engine far slower than its depthwise ones (H200, cuDNN 9.19,
  MobileNetV3-Large at batch 256 in float16: conv2d_grouped_direct_kernel, 1.7 ms a call, where torch's
  depthwise engine took 23 to 46 us), so it runs the plain graph and the epilogue.
- ``find`` times both ways once per layer (the fastest fused-graph plan against the fastest plain plan plus the
  epilogue pass, on random data) and keeps the faster.
- A named engine takes the fused graph where that engine builds one.

A fused graph is taken only after it ran (timed) once on random data: one that builds but fails to run (a
pointwise node an engine accepts but cannot execute) leaves the epilogue to its pass. Where the epilogue runs
separately, ``Choice.note`` says why (the kernel string shows it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import cupy as cp

from algoswap import LRUCache, declare_cache

from . import _cudnn, _epilogue, _pointwise, _runtime

GROUPED = ("guess's rule for grouped convolutions: the plain convolution graph, then the epilogue (for their fused "
           "graphs cuDNN ranked first an engine 40x slower than its depthwise ones on the H200)")
_REPEATS = 5


@dataclass(frozen=True)
class Choice:
    """The plan a forward call runs, and why its epilogue runs as a pass of its own ("" where it does not)."""

    plan: _cudnn.Plan
    note: str = ""


CHOICES = declare_cache("cuda_fusion_choices", 1024, "CUDA: per tensor-core forward convolution with an epilogue, "
                        "the fused cuDNN graph or the plain convolution and the epilogue pass (find: timed once)")
_choices: LRUCache[Choice] = LRUCache(CHOICES)


def choose(g: _cudnn.Geometry, after: _pointwise.Epilogue | None, algorithm: str) -> Choice:
    """The plan serving convolution ``g`` (a forward geometry without epilogue) followed by ``after`` (None:
    nothing, or nothing cuDNN could fuse: the plain plan). Raises _cudnn.NotServed where no plan builds."""
    if after is None:
        return Choice(_cudnn.plan(g, algorithm))
    key = (g, after, algorithm, _runtime.tf32("conv"))
    found: Choice | None = _choices.get(key)
    if found is None:
        found = _choices.put(key, _choose(g, after, algorithm))
    return found


def _choose(g: _cudnn.Geometry, after: _pointwise.Epilogue, algorithm: str) -> Choice:
    if not _pointwise.in_graph(after.activation):
        return Choice(_cudnn.plan(g, algorithm), f"no cuDNN graph node computes {after.activation}")
    if algorithm == "guess" and g.x[1] != g.w[1]:
        return Choice(_cudnn.plan(g, algorithm), GROUPED)
    try:
        fused = _cudnn.plan(dataclasses.replace(g, epilogue=after), algorithm)
    except _cudnn.NotServed as exc:
        return Choice(_cudnn.plan(g, algorithm), f"no fused cuDNN graph builds: {exc}")
    arrays = _Arrays(g, after)
    try:
        fused_time = _time(lambda: fused.run(arrays.x, arrays.w, arrays.y, *arrays.extra))
    except Exception as exc:  # noqa: BLE001 - a graph that builds but does not run is not taken
        return Choice(_cudnn.plan(g, algorithm), f"the fused cuDNN graph does not run: {type(exc).__name__}: {exc}"[:300])
    if algorithm != "find":
        return Choice(fused)
    try:
        plain = _cudnn.plan(g, algorithm)
    except _cudnn.NotServed:
        return Choice(fused)
    plain_time = _time(lambda: arrays.separately(plain))
    if fused_time <= plain_time:
        return Choice(fused)
    return Choice(plain, f"find timed the fused graph at {fused_time * 1e3:.1f} us, the plain convolution and the "
                         f"epilogue at {plain_time * 1e3:.1f} us")


class _Arrays:
    """Random operands of a forward convolution and what follows it, in its memory order (for trial runs)."""

    def __init__(self, g: _cudnn.Geometry, after: _pointwise.Epilogue) -> None:
        rng = cp.random.default_rng(0)
        self.x, self.w, self.y = (_cudnn.random_array(rng, shape, g) for shape in (g.x, g.w, g.y))
        self.bias = _cudnn.random_array(rng, (g.y[1],), g) if after.bias else None
        self.residual = _cudnn.random_array(rng, g.y, g) if after.residual else None
        self.extra = [a for a in (self.bias, self.residual) if a is not None]
        self.activation = after.activation

    def separately(self, plain: _cudnn.Plan) -> None:
        plain.run(self.x, self.w, self.y)
        _epilogue.apply(self.y, self.bias, self.residual, self.activation)


def _time(run: Callable[[], Any]) -> float:
    """Milliseconds per call of ``run`` (after one untimed call, which raises what a failing run raises)."""
    run()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(_REPEATS):
        run()
    stop.record()
    stop.synchronize()
    return float(cp.cuda.get_elapsed_time(start, stop)) / _REPEATS
