"""The GPU at full speed (issue 16): swap_backend against PyTorch eager and torch.compile, side by side in
one run, for models x dtypes x batches, on an NVIDIA GPU; and, with --layers, the achieved TFLOP/s of
ResNet-50's largest convolutions in bfloat16 against a measured bfloat16 matrix-product ceiling.

    python3 benchmarks/cuda_fullspeed.py --dry-run                 # the configurations it would time (no GPU)
    python3 benchmarks/cuda_fullspeed.py                           # ResNet-50, b1/32/256, float32/bfloat16/float16
    python3 benchmarks/cuda_fullspeed.py --layers --json $OUT/fullspeed.json --plot $OUT/fullspeed.png
    python3 benchmarks/cuda_fullspeed.py --models resnet50 mobilenet_v3_large vit_b_16 --batches 32 \\
        --compile-modes default reduce-overhead --swap defaults find graphs-on graphs-off

Configurations: each model (torchvision's by name, or timm:NAME; random init, eval, 1000 classes) at
each batch in each dtype. float32 runs with TF32 as torch has it by default (both flags are printed and
left alone); bfloat16 and float16 run eager and torch.compile in channels_last (model and input),
swap_backend on the contiguous NCHW input a user passes (--swap-channels-last: the channels_last one).
cudnn.benchmark is on. One input per model and batch, rounded so that it is exact in every dtype.

Columns ("ways"): PyTorch eager; torch.compile in each of --compile-modes (dynamic=False; the first
call's time, the compilation, is printed as "setup s" and not timed; max-autotune takes minutes per
configuration: opt-in); swap_backend(model, dtype=...) for each of --swap: "defaults", "find"
({"conv2d": "cuda:find"}), "graphs-on" and "graphs-off" (defaults with CUDA-graph capture switched by
``set_capture``: Model.set_capture(on), else a ``capture`` attribute, else the ALGOSWAP_CAPTURE
environment variable where algoswap reads it; the note says which, or "unavailable"). Conversion
and the first call are "setup s" too.

Timing: CUDA events between consecutive calls after warm-up (the queue stays full, as in a serving
loop: a call costs its GPU time, or its host time when that is larger), --calls per round, the ways
in turns for --rounds rounds; the median, and the spread (half the interquartile range over the
median). Ratios: each swap_backend way over eager (issue 16's target: <= 0.8) and over the faster of
torch.compile's default and reduce-overhead modes, whichever ran (target: <= 1.0); each marked
met/missed.

Accuracy: every way's output against the float64 model (the float32 weights, run once per model and
batch) on the same input, by the tolerance policy's network bound (algoswap.testing._tolerance:
``mismatch`` with ``network_terms``; tfloat32's unit roundoff for float32 while torch's TF32 flags are
on), "pass (<= bound)" or "fail (<= bound)", as ``algoswap demo`` prints them.

--layers: the bfloat16 matrix-product ceiling (8192^3 torch.matmul, random data, mean of 10 after 3
warm-ups), then ResNet-50's --layers-top largest convolutions (FLOPs per call, 2*N*K*C*R*S*P*Q/groups)
in bfloat16 channels_last: torch (F.conv2d through nn.Conv2d) and swap_conv2d on that one Conv2d with
each of --layer-requests; TFLOP/s and the share of the ceiling (target: >= 50%).

A run fits a device command of 10 minutes: --budget SECONDS (default 450) skips a compile column
whose expected compile time no longer fits and then whole configurations, and says which. Progress
goes to stderr (a line per configuration as it starts, a line per way as it is measured); the
tables (markdown) to stdout at the end; --json is rewritten after every configuration, so that a
run stopped early leaves what it measured. An exception in one cell prints its first line in that
cell and the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Iterator

DTYPES = ("float32", "bfloat16", "float16")
HALF = ("bfloat16", "float16")
ISSUE_MODELS = ("resnet50", "mobilenet_v3_large", "vit_b_16")  # ResNet-50, a depthwise model, a transformer
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
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


# ---------------------------------------------------------------------------------------------- plan


def configurations(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(model, batch, dtype) in the order they run: per model and batch (one float64 reference), each dtype."""
    return [(model, batch, dtype) for model in args.models for batch in args.batches for dtype in args.dtypes]


def ways(args: argparse.Namespace) -> list[str]:
    """The columns of every configuration, in the order they are built (the cheap ones first)."""
    return [EAGER] + [SWAP_WAYS[name][0] for name in args.swap] + [f"compile {mode}" for mode in args.compile_modes]


def dry_run(args: argparse.Namespace) -> None:
    cases = configurations(args)
    print(f"{len(cases)} configurations, budget {args.budget:.0f} s, {args.rounds} rounds x {args.calls} timed calls per way")
    print("ways: " + ", ".join(ways(args)))
    for index, (model, batch, dtype) in enumerate(cases, start=1):
        layout = "channels_last" if dtype in HALF else "contiguous (NCHW)"
        print(f"  [{index}/{len(cases)}] {model} {dtype} batch {batch}: eager and torch.compile {layout}")
    if args.layers:
        print(f"layers: bf16 matmul ceiling (8192^3), then ResNet-50's {args.layers_top} largest convolutions at batch "
              f"{args.layer_batch} in bfloat16 channels_last: torch and swap_conv2d with {', '.join(args.layer_requests)}")


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
def _env_is_read() -> bool:
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
    if _env_is_read():
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
        for mode in args.compile_modes:
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
    return result


# ---------------------------------------------------------------------------------------------- output


def tf32_flags() -> dict[str, Any]:
    """torch's TF32 switches as torch has them (this script sets neither)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy flags may warn in favour of fp32_precision
        return {"torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}


def environment_line() -> dict[str, Any]:
    """The device, the versions, torch's TF32 flags and cudnn.benchmark, and algoswap's environment switches."""
    import torch

    import algoswap

    flags = {**tf32_flags(), "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
             "ALGOSWAP_CUDA_TF32": os.environ.get("ALGOSWAP_CUDA_TF32"), CAPTURE_ENV: os.environ.get(CAPTURE_ENV)}
    cuda = algoswap.registry().backends.get("cuda")
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "algoswap": algoswap.__version__,
            "cuda_backend": "missing" if cuda is None else str(cuda.availability()), "flags": flags,
            "capture_env_read": _env_is_read()}


def _ms(cell: dict[str, Any]) -> str:
    if "ms" in cell:
        return f"{cell['ms']:.3f}"
    return cell.get("failed", "-")[:200].replace("|", "/")


def _ratio(cell: dict[str, Any], key: str, target: str) -> str:
    if key not in cell:
        return "-"
    mark = f" ({cell[target]})" if target in cell else ""
    return f"{cell[key]:.2f}x{mark}"


def _verdict(cell: dict[str, Any]) -> str:
    if "passed" not in cell:
        return "-"
    return f"{'pass' if cell['passed'] else 'fail'} (<= {cell['bound']:.1e})"


def _note(cell: dict[str, Any]) -> str:
    parts = []
    if "capture" in cell:
        parts.append(f"capture: {cell['capture']}")
    if cell.get("torch_nodes"):
        parts.append(f"{cell['torch_nodes']} nodes in torch")
    if cell.get("compile_against") and "target_compile" in cell:
        parts.append(f"vs compile {cell['compile_against']}")
    if cell.get("samples") and cell["samples"] < 5:
        parts.append(f"{cell['samples']} calls timed (slow)")
    return "; ".join(parts)


def print_tables(results: dict[str, Any]) -> None:
    env = results.get("environment", {})
    if env:
        print(f"\n{env['device']}, torch {env['torch']} (CUDA {env['cuda']}, cuDNN {env['cudnn']}), algoswap {env['algoswap']}, "
              f"cuda backend: {env['cuda_backend']}")
        print("flags: " + ", ".join(f"{name} = {value}" for name, value in env["flags"].items()))
    print("\n| model | dtype | batch | way | ms | spread | vs eager | vs faster compile | rel. error | verdict (bound) | setup s | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    met = {"met": 0, "missed": 0}
    for row in results["configs"]:
        if "failed" in row:
            print(f"| {row['model']} | {row['dtype']} | {row['batch']} | - | {_ms(row)} | | | | | | | |")
            continue
        for way, cell in row["ways"].items():
            spread = f"±{cell['spread']:.0%}" if "spread" in cell else "-"
            error = f"{cell['error']:.1e}" if "error" in cell else "-"
            setup = f"{cell['setup_s']:.1f}" if "setup_s" in cell else "-"
            print(f"| {row['model']} | {row['dtype']} | {row['batch']} | {way} | {_ms(cell)} | {spread} | "
                  f"{_ratio(cell, 'vs_eager', 'target_eager')} | {_ratio(cell, 'vs_compile', 'target_compile')} | {error} | "
                  f"{_verdict(cell)} | {setup} | {_note(cell)} |")
            for target in ("target_eager", "target_compile"):
                if target in cell:
                    met[cell[target]] += 1
    print(f"\nTargets (swap_backend <= {TARGET_VS_EAGER}x eager, <= {TARGET_VS_COMPILE}x the faster of torch.compile default and "
          f"reduce-overhead, where measured): {met['met']} met, {met['missed']} missed. ms: median over "
          f"{results['args']['rounds']} rounds x {results['args']['calls']} consecutive calls (CUDA events); spread: half the "
          "interquartile range over the median; setup s: compilation, or conversion and first call (not timed).")
    if results.get("skipped"):
        print(f"skipped (budget {results['args']['budget']:.0f} s spent): " + ", ".join(results["skipped"]))
    if results.get("layers_failed"):
        print(f"\nlayers: {results['layers_failed']['failed']}")
    layers = results.get("layers")
    if layers:
        print(f"\nResNet-50's largest convolutions, batch {layers['batch']}, bfloat16 channels_last; bf16 matmul ceiling "
              f"{layers['ceiling_tflops']:.0f} TFLOP/s (target for swapped layers: >= {TARGET_OF_CEILING:.0%} of it)")
        print("\n| layer | count | GFLOP | way | ms | TFLOP/s | of ceiling | target | rel. error | verdict (bound) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for row in layers["rows"]:
            label = f"{row['x'][1]}x{row['x'][2]}² {row['w'][2]}x{row['w'][3]}/{row['stride'][0]} ->{row['w'][0]}"
            for way, cell in (row["ways"] or {"-": {"failed": row.get("failed", "-")}}).items():
                if "ms" not in cell:
                    print(f"| {label} | {row['count']} | {row['flops'] / 1e9:.1f} | {way} | {_ms(cell)} | | | | | |")
                    continue
                print(f"| {label} | {row['count']} | {row['flops'] / 1e9:.1f} | {way} | {cell['ms']:.3f} | {cell['tflops']:.0f} | "
                      f"{cell['of_ceiling']:.0%} | {cell.get('target', '-')} | {cell['error']:.1e} | {_verdict(cell)} |")


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


def write_json(results: dict[str, Any], path: str | None) -> None:
    if path:
        with open(path, "w") as file:
            json.dump(results, file, indent=1, default=str)


# ---------------------------------------------------------------------------------------------- main


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.backends.cudnn.benchmark = True  # TF32 flags: left as torch has them
    budget = Budget(args.budget)
    results: dict[str, Any] = {"args": vars(args), "environment": environment_line(), "configs": [], "skipped": []}
    env = results["environment"]
    say(f"{env['device']}, torch {env['torch']}, cuda backend: {env['cuda_backend']}; " +
        ", ".join(f"{name} = {value}" for name, value in env["flags"].items()))
    if args.layers:
        say("layers: the bf16 matmul ceiling and ResNet-50's largest convolutions")
        try:
            results["layers"] = largest_layers(args)
        except Exception as exc:  # noqa: BLE001
            results["layers_failed"] = failure(exc)
            say(f"  layers: {results['layers_failed']['failed']}")
    cases = configurations(args)
    config: Config | None = None
    unbuilt: dict[tuple[str, int], str] = {}  # (model, batch) whose module, input or float64 reference failed
    for index, (name, batch, dtype) in enumerate(cases, start=1):
        label = f"{name} {dtype} b{batch}"
        if not budget.fits_config(name):
            results["skipped"].append(label)
            say(f"[{index}/{len(cases)}] {label}: skipped, budget spent ({budget.elapsed():.0f} of {args.budget:.0f} s)")
            continue
        say(f"[{index}/{len(cases)}] {label} ({budget.elapsed():.0f} of {args.budget:.0f} s)")
        if (name, batch) in unbuilt:
            results["configs"].append({"model": name, "batch": batch, "dtype": dtype, "failed": unbuilt[(name, batch)]})
            continue
        try:
            if config is None or (config.name, config.batch) != (name, batch):
                config = None
                gc.collect()
                torch.cuda.empty_cache()
                try:
                    config = Config(name, batch)
                except Exception as exc:  # noqa: BLE001
                    unbuilt[(name, batch)] = first_line(exc)
                    raise
            results["configs"].append(measure(config, dtype, args, budget))
        except Exception as exc:  # noqa: BLE001 - one configuration's failure, the run goes on
            say(f"    {first_line(exc)}")
            results["configs"].append({"model": name, "batch": batch, "dtype": dtype, **failure(exc)})
            torch.cuda.empty_cache()
        results["elapsed_s"] = budget.elapsed()
        write_json(results, args.json)
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet50"],
                        help=f"torchvision names, or timm:NAME (default resnet50; the issue's three: {' '.join(ISSUE_MODELS)})")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32, 256])
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--compile-modes", nargs="*", choices=COMPILE_MODES, default=["default"],
                        help="torch.compile columns (default: default; none: no torch.compile; max-autotune takes minutes)")
    parser.add_argument("--swap", nargs="*", choices=list(SWAP_WAYS), default=["defaults"],
                        help="swap_backend columns: defaults, find ({'conv2d': 'cuda:find'}), graphs-on, graphs-off")
    parser.add_argument("--swap-channels-last", action="store_true",
                        help="give swap_backend eager's channels_last input in half precision (default: the contiguous NCHW one)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timing, the ways in turns")
    parser.add_argument("--calls", type=int, default=10, help="consecutive timed calls per way and round")
    parser.add_argument("--warmup", type=int, default=3, help="calls before the first round's timing (1 before later rounds)")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds; later configurations are skipped once spent")
    parser.add_argument("--layers", action="store_true", help="also the largest bf16 convolutions of ResNet-50 against the bf16 matmul ceiling")
    parser.add_argument("--layers-top", type=int, default=4, help="how many of the largest convolutions (by FLOPs per call)")
    parser.add_argument("--layer-batch", type=int, default=32)
    parser.add_argument("--layer-requests", nargs="+", default=["cuda:guess", "cuda:find"], help="swap_conv2d requests per layer")
    parser.add_argument("--json", help="write every number to this JSON file (rewritten after each configuration)")
    parser.add_argument("--plot", help="write a bar chart of the swap_backend ratios per configuration to this PNG file (matplotlib)")
    parser.add_argument("--from-json", help="no GPU: print the tables (and --plot) of a saved --json run")
    parser.add_argument("--dry-run", action="store_true", help="list the configurations and ways, time nothing (no GPU, no torch)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run:
        dry_run(args)
        return 0
    if args.from_json:
        with open(args.from_json) as file:
            results = json.load(file)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # models.py, cuda_conv_layers.py beside this file
        results = run_all(args)
        write_json(results, args.json)
    print_tables(results)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
