"""cuda_fullspeed.py's ways (issue 16): the constants of its columns and targets, the --budget
bookkeeping, CUDA-event timing, the CUDA-graph capture switch (``set_capture``), and one configuration
measured: the float32 model with its float64 reference and the tolerance verdict (``Config``), then
eager, each swap_backend way and each torch.compile mode built, checked and timed in turns, with their
ratios to eager and to the faster compile mode (``measure``). Imports no torch until a GPU run calls it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import os
import sys
import time
from typing import Any, Callable, Iterator

DTYPES = ("float32", "bfloat16", "float16")
HALF = ("bfloat16", "float16")
ISSUE_MODELS = ("resnet50", "mobilenet_v3_large", "vit_b_16")  # ResNet-50, a depthwise model, a transformer
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
AUTO = "auto"  # per batch, the mode of FASTER_COMPILE that issue 16's table found faster on the H200
AUTO_SMALL_BATCH = 32  # up to this batch reduce-overhead was faster (0.56-2.84 ms against 1.94-3.44), above it default
FASTER_COMPILE = ("default", "reduce-overhead")  # the issue's target is against the faster of these two
SWAP_WAYS = {  # --swap name: (column, algorithm selector, capture: None to leave it, else on/off)
    "defaults": ("swap_backend", None, None),
    "find": ("swap_backend cuda:find", {"conv2d": "cuda:find"}, None),
    "graphs-on": ("swap_backend graphs on", None, True),
    "graphs-off": ("swap_backend graphs off", None, False),
}
EAGER = "eager"
TARGET_VS_EAGER, TARGET_VS_COMPILE, TARGET_OF_CEILING = 0.8, 1.0, 0.5
CAPTURE_ENV = "ALGOSWAP_CAPTURE"
# Expected compile time of a mode not yet seen for a model (seconds), for the budget: the largest seen is used after.
FIRST_COMPILE_GUESS = {"default": 60.0, "reduce-overhead": 75.0, "max-autotune": 300.0}


# ---------------------------------------------------------------------------------------------- timing


class Budget:
    """Seconds left of --budget, and how long each compile mode took per model, to predict the next."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.started = seconds, time.perf_counter()
        self.compile_s: dict[tuple[str, str], float] = {}
        self.config_s: dict[str, float] = {}  # per model: the longest configuration without its compilation

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def fits_compile(self, model: str, mode: str) -> bool:
        return self.left() > self.compile_s.get((model, mode), FIRST_COMPILE_GUESS[mode])

    def fits_config(self, model: str) -> bool:
        return self.left() > self.config_s.get(model, 0.0)


def event_times(run: Callable[[], Any], calls: int, warmup: int) -> list[float]:
    """Milliseconds of each of ``calls`` consecutive calls of ``run``, between CUDA events recorded after
    each (the queue stays full: a call costs its GPU time, or its host time when that is larger)."""
    import torch

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    marks[0].record()
    for mark in marks[1:]:
        run()
        mark.record()
    marks[-1].synchronize()
    return [begin.elapsed_time(end) for begin, end in zip(marks, marks[1:])]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".strip()


def failure(exc: BaseException) -> dict[str, str]:
    """A failed cell: its first line (printed), and the whole message up to 2000 characters (in --json)."""
    return {"failed": first_line(exc), "exception": f"{type(exc).__name__}: {exc}"[:2000]}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- CUDA graphs switch


@functools.lru_cache(maxsize=None)
def env_is_read() -> bool:
    """Whether an installed algoswap package (the core or the CUDA backend) mentions ALGOSWAP_CAPTURE."""
    import importlib.util
    from pathlib import Path

    for package in ("algoswap", "algoswap_cuda"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if any(CAPTURE_ENV in path.read_text(errors="ignore") for path in Path(folder).rglob("*.py")):
                return True
    return False


def set_capture(model: Any, on: bool) -> str:
    """Switch CUDA-graph capture of a swap_backend Model on or off by the first switch this algoswap has:
    ``model.set_capture(on)``, a ``capture`` attribute, the ALGOSWAP_CAPTURE environment variable (where
    algoswap reads it; set here, restored by the caller). Returns which one worked, or "unavailable"."""
    setter = getattr(model, "set_capture", None)
    if callable(setter):
        setter(on)
        return "model.set_capture()"
    if hasattr(model, "capture") and not callable(getattr(model, "capture")):  # an attribute, not a method to keep
        setattr(model, "capture", on)
        return "model.capture"
    if env_is_read():
        os.environ[CAPTURE_ENV] = "1" if on else "0"
        return f"env {CAPTURE_ENV}"
    return "unavailable"


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in os.environ inside the block, every name as it was after it."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# ---------------------------------------------------------------------------------------------- one configuration


def tf32_flags() -> dict[str, Any]:
    """torch's TF32 switches as torch has them (this script sets neither)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy flags may warn in favour of fp32_precision
        return {"torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}


class Config:
    """One model at one batch: its float32 module, the input (exact in every dtype), the float64 output."""

    def __init__(self, name: str, batch: int) -> None:
        import torch

        from algoswap import zoo
        from algoswap.testing._tolerance import network_terms
        from models import qualified

        self.name, self.batch = name, batch
        self.module = zoo.build(qualified(name), num_classes=1000)
        x = zoo.sample_input(qualified(name), batch).to(torch.bfloat16).float()
        self.x = torch.where(x.abs() < 2.0**-14, torch.zeros_like(x), x).cuda()  # normal in float16 too: exact there
        started = time.perf_counter()
        attention: list[int] = []
        reference = copy.deepcopy(self.module).cuda().double()
        hooks = [m.register_forward_hook(functools.partial(_attention_lengths, attention))
                 for m in reference.modules() if isinstance(m, torch.nn.MultiheadAttention)]
        with torch.no_grad():
            self.expected = reference(self.x.double())
        for hook in hooks:
            hook.remove()
        del reference
        self.reference_s = time.perf_counter() - started
        self.terms = network_terms(self.module, functional=tuple(attention))

    def bound_dtype(self, dtype: str) -> str:
        """The precision the tolerance policy judges a result of ``dtype`` by: tfloat32 for float32 while torch's TF32 flags are on."""
        flags = tf32_flags()
        if dtype == "float32" and (flags["torch.backends.cudnn.allow_tf32"] or flags["torch.backends.cuda.matmul.allow_tf32"]):
            return "tfloat32"
        return dtype

    def judge(self, out: Any, dtype: str) -> dict[str, Any]:
        from algoswap.testing._tolerance import comparison_bound, mismatch, relative_error

        judged = self.bound_dtype(dtype)
        bound = comparison_bound(judged, "float64", **self.terms)
        problem = mismatch(out, self.expected, dtype=judged, **self.terms)
        return {"error": relative_error(out, self.expected), "bound": bound, "bound_dtype": judged, "passed": not problem,
                "problem": problem}


def _attention_lengths(lengths: list[int], module: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """The reduction lengths of an nn.MultiheadAttention's functional products: in-projection, scores, values."""
    sequence = inputs[0].shape[1 if module.batch_first else 0]
    lengths += [module.embed_dim + 1, module.head_dim, sequence]


def measure(config: Config, dtype_name: str, args: argparse.Namespace, budget: Budget) -> dict[str, Any]:
    """Every way of one configuration: built (setup time), checked against float64, timed in turns."""
    import torch

    dtype = getattr(torch, dtype_name)
    layout = torch.channels_last if dtype_name in HALF else torch.contiguous_format
    plain = config.x.to(dtype)  # swap_backend's input unless --swap-channels-last: what a user passes
    x = plain.contiguous(memory_format=layout)
    eager = copy.deepcopy(config.module).cuda().to(dtype).to(memory_format=layout)
    cells: dict[str, dict[str, Any]] = {}
    runs: dict[str, Callable[[], Any]] = {}
    started = time.perf_counter()
    compile_s = 0.0

    def build(way: str, make: Callable[[], tuple[Callable[[], Any], dict[str, Any]]]) -> None:
        cell: dict[str, Any] = {}
        cells[way] = cell
        try:
            begun = time.perf_counter()
            run, notes = make()
            out = run()
            torch.cuda.synchronize()
            cell["setup_s"] = time.perf_counter() - begun
            cell.update(notes)
            cell.update(config.judge(out.detach().clone(), dtype_name))
            runs[way] = run
        except Exception as exc:  # noqa: BLE001 - reported in its cell, the run goes on
            cell.update(failure(exc))
            say(f"    {way}: {cell['failed']}")
            torch.cuda.empty_cache()

    with torch.no_grad():  # not inference_mode: its tensors would reach torch.compile's graphs
        build(EAGER, lambda: (lambda: eager(x), {}))
        for name in args.swap:
            column, selector, capture = SWAP_WAYS[name]
            build(column, functools.partial(_swapped, config, dtype, x if args.swap_channels_last else plain, selector, capture))
        for mode in compile_modes(args.compile_modes, config.batch):
            way = f"compile {mode}"
            if not budget.fits_compile(config.name, mode):
                cells[way] = {"failed": f"skipped: budget ({budget.left():.0f} s left, compiling takes about "
                                        f"{budget.compile_s.get((config.name, mode), FIRST_COMPILE_GUESS[mode]):.0f} s)"}
                say(f"    {way}: {cells[way]['failed']}")
                continue
            build(way, functools.partial(_compiled, eager, x, mode))
            if "setup_s" in cells[way]:
                compile_s += cells[way]["setup_s"]
                budget.compile_s[(config.name, mode)] = max(budget.compile_s.get((config.name, mode), 0.0), cells[way]["setup_s"])
        _time_in_turns(runs, cells, args)
    _ratios(cells)
    for way, cell in cells.items():
        if "ms" in cell:
            say(f"    {way}: {cell['ms']:.3f} ms ±{cell['spread']:.0%}, rel. error {cell['error']:.1e}")
    budget.config_s[config.name] = max(budget.config_s.get(config.name, 0.0), time.perf_counter() - started - compile_s)
    del runs, eager
    torch._dynamo.reset()  # the compiled graphs (and reduce-overhead's CUDA-graph pools) go
    gc.collect()
    torch.cuda.empty_cache()
    return {"model": config.name, "batch": config.batch, "dtype": dtype_name,
            "layout": "channels_last" if dtype_name in HALF else "contiguous",
            "swap_input": "channels_last" if dtype_name in HALF and args.swap_channels_last else "contiguous",
            "reference_s": config.reference_s, "ways": cells}


def compile_modes(asked: list[str], batch: int) -> list[str]:
    """The torch.compile modes to build: ``asked`` with "auto" replaced by the faster mode for ``batch``."""
    auto = "reduce-overhead" if batch <= AUTO_SMALL_BATCH else "default"
    return list(dict.fromkeys(auto if mode == AUTO else mode for mode in asked))


def _swapped(config: Config, dtype: Any, x: Any, selector: Any, capture: bool | None) -> tuple[Callable[[], Any], dict[str, Any]]:
    """A swap_backend conversion of the float32 module (``dtype``; ``selector``; capture switched when not None)."""
    import algoswap
    from models import torch_nodes

    switch = {} if capture is None else {CAPTURE_ENV: "1" if capture else "0"}
    with environment(switch):  # also read at conversion, where the environment variable is the switch
        model = algoswap.swap_backend(copy.deepcopy(config.module).cuda(), selector, tuple(x.shape), dtype=dtype, fallback="torch")
        how = None if capture is None else set_capture(model, capture)

    def run() -> Any:
        return model(x)

    def run_switched() -> Any:  # the variable set around each call only: the other ways run in turns without it
        with environment(switch):
            return model(x)

    notes: dict[str, Any] = {"torch_nodes": torch_nodes(model)}
    if how is not None:
        notes["capture"] = how
    explained = [line.strip() for line in str(model.explain()).splitlines()
                 if any(word in line.lower() for word in ("graph", "replay", "tf32"))]
    if explained:
        notes["explain"] = list(dict.fromkeys(explained))[:4]
    return (run_switched if how and how.startswith("env") else run), notes


def _compiled(eager: Any, x: Any, mode: str) -> tuple[Callable[[], Any], dict[str, Any]]:
    import torch

    compiled = torch.compile(eager, mode=None if mode == "default" else mode, dynamic=False)
    if mode == "default":
        return (lambda: compiled(x)), {}

    def run() -> Any:  # reduce-overhead and max-autotune replay CUDA graphs, whose outputs the next replay overwrites
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    return run, {}


def _time_in_turns(runs: dict[str, Callable[[], Any]], cells: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """--rounds rounds, in each every way's --calls consecutive calls (fewer for a way slower than 0.25 s a call)."""
    from models import summarise

    samples: dict[str, list[float]] = {way: [] for way in runs}
    slow = {way for way, cell in cells.items() if way in runs and cell["setup_s"] > 0.25 and _one_call_s(runs[way]) > 0.25}
    for round_ in range(args.rounds):
        for way, run in runs.items():
            if way in slow and round_:
                continue
            try:
                samples[way] += event_times(run, 2 if way in slow else args.calls, args.warmup if round_ == 0 else 1)
            except Exception as exc:  # noqa: BLE001
                cells[way].update(failure(exc))
    for way, summary in summarise({way: times for way, times in samples.items() if times and "failed" not in cells[way]}).items():
        cells[way].update(summary, samples=len(samples[way]))


def _one_call_s(run: Callable[[], Any]) -> float:
    import torch

    begun = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - begun


def _ratios(cells: dict[str, dict[str, Any]]) -> None:
    """Each swap_backend way over eager and over the faster of compile default / reduce-overhead, with the targets."""
    eager = cells.get(EAGER, {}).get("ms")
    compiled = {mode: cells[f"compile {mode}"]["ms"] for mode in FASTER_COMPILE if "ms" in cells.get(f"compile {mode}", {})}
    faster = min(compiled.items(), key=lambda item: item[1]) if compiled else None
    for way, cell in cells.items():
        if "ms" not in cell:
            continue
        if eager:
            cell["vs_eager"] = cell["ms"] / eager
        if faster:
            cell["vs_compile"], cell["compile_against"] = cell["ms"] / faster[1], faster[0]
        if way.startswith("swap_backend"):
            if eager:
                cell["target_eager"] = "met" if cell["vs_eager"] <= TARGET_VS_EAGER else "missed"
            if faster:
                cell["target_compile"] = "met" if cell["vs_compile"] <= TARGET_VS_COMPILE else "missed"

