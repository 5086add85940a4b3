"""torchvision and timm models (random weights, 224x224) through swap_backend, against PyTorch eager and
ONNX Runtime on the CPU, or against eager and torch.compile on a GPU; every way timed in turns in one process.

    make bench                                               # installs onnxruntime, onnx and matplotlib, runs this too
    .venv/bin/python benchmarks/models.py                    # the default list, batch 1 and 8
    .venv/bin/python benchmarks/models.py --models resnet18 timm:resnet50 --batch 1 --repeats 30
    .venv/bin/python benchmarks/models.py --json models.json --plot docs/models.png
    .venv/bin/python benchmarks/models.py --from-json models.json --plot docs/models.png   # table and plot only
    python3 benchmarks/models.py --device cuda --batch 1 8 64   # on the GPU machine (the CUDA backend installed)

A name without "library:" is torchvision's. Per model and batch it prints how many nodes ran in torch
(``swap_backend(model, None, shape, fallback="torch")``, explain() rows whose implementation is
"torch ..."), the relative error of each way against eager, and each way's median time with its spread
(half the interquartile range over the median). CPU: eager, swap_backend, and ONNX Runtime (the model
exported with ``torch.onnx.export(..., dynamo=False)``, CPU execution provider, ORT_ENABLE_ALL, intra-op
threads = ``--threads``, default OMP_NUM_THREADS or else the cores); ratios to eager and swap_backend / ORT (issue 14's target:
at most 0.9). GPU: eager, torch.compile (default mode), swap_backend with defaults and with
``{"conv2d": "cuda:find"}``, CUDA-event medians, TF32 off on both sides (issue 14's targets: at most
1.0x and 0.9x eager).

Nobody's threads spin long between calls: GOMP_SPINCOUNT is set before torch loads (torch's and oneDNN's
OpenMP threads would otherwise spin and starve each other), and ORT's session has
``session.intra_op.allow_spinning=0``. With ORT's default spinning, its workers kept spinning after each
run and doubled the time of the way timed after it (ResNet-18, batch 1, 2 threads, load 5: swap_backend
47 ms alone, 96 ms in turns with a spinning ORT, 50 ms with a non-spinning one); ``--ort-spinning`` adds
that session as another way. ``--threads`` sets OMP_NUM_THREADS before any OpenMP runtime loads.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
import io
import json
import statistics
import sys
import warnings
from typing import Any, Callable

CORES = len(os.sched_getaffinity(0))


def _threads_from_argv() -> int:
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", CORES)))
    return early.parse_known_args()[0].threads


THREADS = _threads_from_argv()
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # oneDNN's and torch's OpenMP pools, before either loads

import numpy as np  # noqa: E402
import torch  # noqa: E402

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from algoswap._progress import progress  # noqa: E402
from algoswap._torch.job import relative_error  # noqa: E402
from dnnl_conv_layers import times_in_turns_ms  # noqa: E402  (every way timed in turns)
from swap_models import plot as plot_ratios  # noqa: E402

DEFAULT_MODELS = ["resnet18", "resnet50", "densenet121", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_800mf",
                  "convnext_tiny", "timm:efficientnet_b0", "timm:resnet50"]
EAGER = "torch"  # the way every ratio is taken against (swap_models.plot's reference too)
Runs = dict[str, Callable[[], Any]]


def qualified(name: str) -> str:
    """"resnet18" -> "torchvision:resnet18"; "timm:resnet50" as it is."""
    return name if ":" in name else f"torchvision:{name}"


def torch_nodes(model: algoswap.Model) -> int:
    """How many nodes of the latest program ran in PyTorch (explain() rows "torch (fallback) ...")."""
    return sum(row.implementation.startswith("torch") for row in model.explain())


def onnx_session(module: torch.nn.Module, x: torch.Tensor, threads: int, profile: str | None = None,
                 spinning: bool = False) -> Any:
    """An ONNX Runtime session of ``module`` exported for ``x``'s shape (TorchScript exporter): CPU
    execution provider, every graph optimisation, ``threads`` intra-op threads, its worker threads not
    spinning between runs unless ``spinning`` (see the module's docstring); ``profile``: a file prefix
    for ORT's per-node profile (SessionOptions.enable_profiling)."""
    import onnxruntime as ort

    exported = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, (x,), exported, dynamo=False, input_names=["input"], output_names=["output"])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(exported.getvalue(), options, providers=["CPUExecutionProvider"])


def onnx_run(session: Any, x: torch.Tensor) -> Callable[[], np.ndarray]:
    feed = {"input": x.numpy()}
    return lambda: session.run(None, feed)[0]


def summarise(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Median ms of each way and its spread: half the interquartile range over the median."""
    result = {}
    for way, times in samples.items():
        quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
        median = statistics.median(times)
        result[way] = {"ms": median, "spread": (quartiles[2] - quartiles[0]) / 2 / median}
    return result


def cpu_row(name: str, batch: int, repeats: int, threads: int, ort_spinning: bool = False) -> dict[str, Any]:
    """One model at one batch on the CPU: eager, swap_backend and ONNX Runtime (``ort_spinning``: also with
    its threads spinning), timed in turns."""
    module, x = zoo.build(qualified(name), num_classes=1000), zoo.sample_input(qualified(name), batch)
    converted = algoswap.swap_backend(module, None, tuple(x.shape), fallback="torch")
    runs: Runs = {EAGER: lambda: module(x), "swap_backend": lambda: converted(x),
                  "onnxruntime": onnx_run(onnx_session(module, x, threads), x)}
    if ort_spinning:
        runs["onnxruntime spinning"] = onnx_run(onnx_session(module, x, threads, spinning=True), x)
    with torch.inference_mode():
        expected = module(x)
        errors = {way: relative_error(torch.as_tensor(run()).float(), expected) for way, run in runs.items()}
        load = os.getloadavg()[0]
        times = summarise(times_in_turns_ms(runs, repeats, warmup=2))
    return _row(name, batch, "cpu", converted, times, errors, load)


def cuda_row(name: str, batch: int, repeats: int, rounds: int = 5) -> dict[str, Any]:
    """One model at one batch on the GPU: eager, torch.compile and swap_backend (defaults; cuda:find),
    CUDA-event medians of ``repeats`` calls per round, the ways in turns for ``rounds`` rounds."""
    from cuda_conv_layers import timed  # CUDA-event medians (imports CuPy: GPU machines only)

    module = zoo.build(qualified(name), num_classes=1000).cuda()
    x = zoo.sample_input(qualified(name), batch).cuda()
    compiled = torch.compile(module)
    converted = algoswap.swap_backend(module, fallback="torch")
    found = algoswap.swap_backend(module, {"conv2d": "cuda:find"}, fallback="torch")
    runs: Runs = {EAGER: lambda: module(x), "torch.compile": lambda: compiled(x), "swap_backend": lambda: converted(x),
                  "swap_backend cuda:find": lambda: found(x)}
    with torch.inference_mode():
        expected = module(x)
        errors = {way: relative_error(run().float(), expected) for way, run in runs.items()}
        load = os.getloadavg()[0]
        samples: dict[str, list[float]] = {way: [] for way in runs}
        for round_ in range(rounds):
            for way, run in runs.items():
                samples[way].append(timed(run, repeats, warmup=3 if round_ == 0 else 1, inner=1))
    return _row(name, batch, "cuda", converted, summarise(samples), errors, load)


def _row(name: str, batch: int, device: str, converted: algoswap.Model, times: dict[str, dict[str, float]],
         errors: dict[str, float], load: float) -> dict[str, Any]:
    program = converted.program
    eager = times[EAGER]["ms"]
    ways = {way: {**t, "vs_eager": t["ms"] / eager, "error": errors[way]} for way, t in times.items()}
    row = {"model": name, "batch": batch, "device": device, "torch_nodes": torch_nodes(converted),
           "steps": 0 if program is None else len(program.steps), "load": load, "ways": ways}
    if "onnxruntime" in ways:
        row["swap_over_ort"] = ways["swap_backend"]["ms"] / ways["onnxruntime"]["ms"]
    return row


def describe(row: dict[str, Any]) -> str:
    ways = row["ways"]
    cells = [f"{row['model']:<22} {row['batch']:>3} {row['torch_nodes']:>8}"]
    cells += [f"{w['ms']:9.2f} ±{w['spread']:3.0%} {w['vs_eager']:5.2f}x {w['error']:7.1e}" for w in ways.values()]
    if "swap_over_ort" in row:
        cells.append(f"{row['swap_over_ort']:9.2f}")
    return " ".join(cells) + f"   load {row['load']:.1f}"


def header(ways: list[str], with_ort: bool) -> str:
    cells = [f"{'model':<22} {'N':>3} {'in torch':>8}"] + [f"{way[:32]:>32}" for way in ways]
    if with_ort:
        cells.append(f"{'swap/ORT':>9}")
    line = " ".join(cells)
    units = " " * 35 + " ".join(f"{'ms ±spread vs eager rel.err':>32}" for _ in ways)
    return f"{line}\n{units}"


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Bars of each way's time over eager per model and batch (swap_models.plot's chart)."""
    flat = [(f"{r['model']} b{r['batch']}", way, w["ms"], w["error"]) for r in rows for way, w in r["ways"].items()]
    plot_ratios(flat, path)


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    cases = [(name, batch) for name in args.models for batch in args.batch]
    rows: list[dict[str, Any]] = []
    print(f"torch {torch.__version__}, {THREADS} threads (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}), "
          f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}, {args.repeats} timed calls per way, device {args.device}", flush=True)
    for name, batch in progress(cases, "models"):
        if args.device == "cuda":
            row = cuda_row(name, batch, args.repeats)
        else:
            row = cpu_row(name, batch, args.repeats, THREADS, args.ort_spinning)
        if not rows:
            print(header(list(row["ways"]), "swap_over_ort" in row), flush=True)
        rows.append(row)
        print(describe(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="torchvision names, or timm:NAME")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per way (in turns) on the CPU; per round on the GPU")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help="ORT intra-op threads and OMP_NUM_THREADS (default: OMP_NUM_THREADS, else the cores)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--ort-spinning", action="store_true",
                        help="also ONNX Runtime with its default spinning worker threads (they slow the way timed next)")
    parser.add_argument("--json", help="write the rows to this JSON file")
    parser.add_argument("--from-json", help="read the rows from this JSON file instead of measuring")
    parser.add_argument("--plot", help="write a bar chart of the times over eager to this PNG file (needs matplotlib)")
    args = parser.parse_args()
    if args.device == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        os.environ.pop("ALGOSWAP_CUDA_TF32", None)  # the CUDA backend keeps TF32 off unless this is 1
    if args.from_json:
        with open(args.from_json) as file:
            rows = json.load(file)
        print(header(list(rows[0]["ways"]), "swap_over_ort" in rows[0]))
        print("\n".join(describe(row) for row in rows))
    else:
        rows = measure(args)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    sys.exit(main())
