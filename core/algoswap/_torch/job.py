"""The main job of ``algoswap demo``: swap a zoo model's convolutions to each available algorithm,
check the output against plain PyTorch, and time it."""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import zoo
from .._global import get_registry
from .._progress import progress
from .convert import swap_backend
from .explain import explain
from .selectors import prefer
from .swap import swap_conv2d


@dataclass
class JobRow:
    """One way of running the model: what ran, how close to PyTorch, how fast."""

    label: str
    layers: str
    error: float | None
    milliseconds: float


def median_ms(run: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``run`` in ms, after one warm-up call (which is the answer when it took over a second)."""
    started = time.perf_counter()
    run()
    if time.perf_counter() - started > 1.0:
        return (time.perf_counter() - started) * 1e3
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def conv_algorithms() -> list[str]:
    """Every available conv2d implementation, as "backend:algorithm"."""
    registry = get_registry()
    return [i.qualified for i in registry.implementations("conv2d") if registry.backends[i.backend].availability() is True]


def run_job(name: str = zoo.DEFAULT_MODEL, batch: int = 1, small: bool = False, repeats: int = 3) -> tuple[list[JobRow], torch.nn.Module]:
    """Rows for plain PyTorch, each conv2d algorithm and swap_backend; also a swapped model to explain."""
    model, x = zoo.build(name), zoo.sample_input(name, batch, small=small)
    with torch.inference_mode():
        expected = model(x)
        rows = [JobRow("torch (F.conv2d)", "all", None, median_ms(lambda: model(x), repeats))]
        shown = model
        for algorithm in progress(conv_algorithms(), f"swapping {name}'s convolutions"):
            swapped = swap_conv2d(copy.deepcopy(model), prefer(algorithm), sample_input_shape=tuple(x.shape))
            served = list(explain(swapped))
            label = f"{sum(r.request == algorithm for r in served)}/{len(served)}"
            error = relative_error(swapped(x), expected)
            rows.append(JobRow(algorithm, label, error, median_ms(lambda: swapped(x), repeats)))
            shown = swapped if shown is model or "winograd" in algorithm else shown
        converted = swap_backend(model, sample_input_shape=tuple(x.shape))
        error = relative_error(converted(x), expected)
        rows.append(JobRow("swap_backend (whole model)", "all", error, median_ms(lambda: converted(x), repeats)))
    return rows, shown


def print_job(name: str = zoo.DEFAULT_MODEL, batch: int = 1, small: bool = False, repeats: int = 3) -> None:
    """The demo's report: the comparison table, then ``explain`` of the last swapped model."""
    shape = zoo.input_shape(name, batch, small=small)
    print(f"== {name} (random init, seed 0), input {'x'.join(map(str, shape))}: swap_conv2d with each conv2d algorithm ==")
    rows, last = run_job(name, batch, small, repeats)
    base = rows[0].milliseconds
    print(f"{'algorithm':<27} {'conv layers':>11} {'rel. error':>11} {'ms':>9} {'vs torch':>9}")
    for row in rows:
        error = "-" if row.error is None else f"{row.error:.2e}"
        print(f"{row.label:<27} {row.layers:>11} {error:>11} {row.milliseconds:9.1f} {row.milliseconds / base:8.2f}x")
    print("(layers an algorithm cannot serve, e.g. winograd on non-3x3 or strided convs, run the default)")
    print("\n== explain: which implementation and kernel ran each swapped layer ==")
    print(explain(last))
