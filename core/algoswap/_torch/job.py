"""The main job of ``algoswap demo``: swap a zoo model's convolutions to each available algorithm,
judge the output against plain PyTorch by the tolerance policy (algoswap.testing._tolerance), and time it."""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import zoo
from .._global import get_registry
from .._progress import progress
from ..testing._tolerance import comparison_bound, dtype_name, mismatch, network_terms, relative_error
from .convert import swap_backend
from .explain import explain
from .selectors import prefer
from .swap import swap_conv2d

# Reference algorithms that take seconds where the others take milliseconds: measured on 2 cores,
# ResNet-18 at 224x224, numpy:fft took 56 s of the demo's 88 s (every other algorithm under 0.5 s).
SLOW_ALGORITHMS = frozenset({"numpy:fft"})
REFERENCE = "torch (F.conv2d)"
WHOLE_MODEL = "swap_backend (whole model)"


@dataclass
class JobRow:
    """One way of running the model: what ran, its verdict against PyTorch, and the time of each timed run."""

    label: str
    layers: str
    error: float | None = None  # None: the reference itself
    bound: float = 0.0
    passed: bool = False
    milliseconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.milliseconds)

    @property
    def spread(self) -> float | None:
        """The slowest timed run minus the fastest, as a share of the median (None after one run)."""
        times = self.milliseconds
        return (max(times) - min(times)) / self.median if len(times) > 1 and self.median > 0 else None


@dataclass
class Job:
    """The rows in the order they ran, the algorithms left out as slow, and the fastest passing run's model."""

    rows: list[JobRow]
    skipped: list[str]
    fastest: JobRow | None = None
    fastest_model: Any = None


def timed_ms(run: Callable[[], Any], repeats: int) -> list[float]:
    """Wall times of ``repeats`` calls of ``run`` in ms, after one warm-up call (which alone is the answer
    when it took over a second)."""
    started = time.perf_counter()
    run()
    if time.perf_counter() - started > 1.0:
        return [(time.perf_counter() - started) * 1e3]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def conv_algorithms(slow: bool = False) -> tuple[list[str], list[str]]:
    """Every available conv2d implementation, as "backend:algorithm", and those of them left out as slow."""
    registry = get_registry()
    found = [i.qualified for i in registry.implementations("conv2d") if registry.backends[i.backend].availability() is True]
    skipped = [] if slow else [name for name in found if name in SLOW_ALGORITHMS]
    return [name for name in found if name not in skipped], skipped


def run_job(name: str = zoo.DEFAULT_MODEL, batch: int = 1, small: bool = False, repeats: int = 3, slow: bool = False) -> Job:
    """Rows for plain PyTorch, each conv2d algorithm (swap_conv2d) and swap_backend, measured in that order."""
    model, x = zoo.build(name), zoo.sample_input(name, batch, small=small)
    algorithms, skipped = conv_algorithms(slow)
    terms = network_terms(model)
    job = Job([], skipped)
    with torch.inference_mode():
        expected = model(x)
        for label in progress([REFERENCE, *algorithms, WHOLE_MODEL], f"measuring {name}"):
            run, layers = _prepare(label, model, tuple(x.shape))
            out = run(x)
            row = JobRow(label, layers, milliseconds=timed_ms(lambda: run(x), repeats))
            if label != REFERENCE:
                row.error, row.passed = relative_error(out, expected), not mismatch(out, expected, **terms)
                row.bound = comparison_bound(dtype_name(out), dtype_name(expected), **terms)
            job.rows.append(row)
            if row.passed and (job.fastest is None or row.median < job.fastest.median):
                job.fastest, job.fastest_model = row, run
    return job


def _prepare(label: str, model: torch.nn.Module, shape: tuple[int, ...]) -> tuple[Any, str]:
    """The model of one row, and how many of its convolutions the requested algorithm serves."""
    if label == REFERENCE:
        return model, "all"
    if label == WHOLE_MODEL:
        return swap_backend(model, sample_input_shape=shape), "all"
    swapped = swap_conv2d(copy.deepcopy(model), prefer(label), sample_input_shape=shape)
    served = list(explain(swapped))
    return swapped, f"{sum(r.request == label for r in served)}/{len(served)}"


def print_job(name: str = zoo.DEFAULT_MODEL, batch: int = 1, small: bool = False, repeats: int = 3, slow: bool = False) -> Job:
    """The demo's main table: each run's verdict against PyTorch (with the bound it was judged by) and times."""
    shape = zoo.input_shape(name, batch, small=small)
    print(f"== {name} (random init, seed 0), input {'x'.join(map(str, shape))}: swap_conv2d with each conv2d "
          f"algorithm, checked against PyTorch ==", flush=True)
    job = run_job(name, batch, small, repeats, slow)
    base = job.rows[0].median
    print(f"{'run':<27} {'conv layers':>11} {'rel. error':>11}  {'verdict (bound)':<19} {'ms':>9} {'spread':>7} {'vs torch':>9}")
    for row in job.rows:
        error = "-" if row.error is None else f"{row.error:.2e}"
        verdict = "reference" if row.error is None else f"{'pass' if row.passed else 'fail'} (<= {row.bound:.1e})"
        spread = "-" if row.spread is None else f"{row.spread:.0%}"
        print(f"{row.label:<27} {row.layers:>11} {error:>11}  {verdict:<19} {row.median:9.1f} {spread:>7} {row.median / base:8.2f}x")
    if job.skipped:
        print(f"skipped as slow (--slow includes them): {', '.join(job.skipped)}")
    print(f"(ms: median of {repeats} timed runs after a warm-up, or the warm-up alone when it took over 1 s; spread: slowest\n"
          " minus fastest over the median; bound: the tolerance policy's for this network in float32, docs/development.md;\n"
          " layers an algorithm cannot serve, e.g. winograd on non-3x3 or strided convs, run the default)")
    return job
