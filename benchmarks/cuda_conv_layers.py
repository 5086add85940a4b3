"""Every conv layer of ResNet-50 (batch 32, float32) on the GPU: each algorithm of the CUDA backend
next to torch.nn.functional.conv2d (cudnn.benchmark on), with TF32 off and on; then whole ResNet-50.

Times are medians of CUDA-event timings after warm-up; ratios are ours / torch (below 1: faster).
Column t_heur is torch with cudnn.benchmark off (cuDNN's heuristic pick, like ``guess``) / torch.
Achieved TFLOP/s of the largest layers are set against a measured ceiling (a large matrix product
through cuBLAS in the same precision). Needs a GPU, CuPy and the cuDNN frontend:

    python benchmarks/cuda_conv_layers.py [--batch 32] [--reps 20] [--out results.json]
    python benchmarks/cuda_conv_layers.py --model-only [--algorithms guess]   # whole ResNet-50 alone
    python benchmarks/cuda_conv_layers.py --from-json docs/cuda_conv_layers.json --plot docs/cuda_conv_layers.png  # no GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import cupy as cp
import torch
import torch.nn.functional as F

import algoswap
import algoswap_cuda
from algoswap import zoo

ALGORITHMS = ("guess", "find", "implicit_gemm", "implicit_precomp_gemm", "gemm", "fft", "fft_tiling", "winograd_nonfused", "smm", "direct")


def timed(fn: Callable[[], Any], reps: int, warmup: int = 3, inner: int = 10) -> float:
    """Median milliseconds of one call of ``fn``: CUDA events around ``inner`` calls in a row (so that
    the GPU's queue stays full and host-side call overhead hides behind the GPU's work, as in a
    model), ``reps`` times."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner)
    return statistics.median(times)


def resnet50_layers(batch: int) -> list[dict[str, Any]]:
    """The distinct conv layers of ResNet-50 at 224x224, with how often each occurs."""
    model = zoo.build("resnet50").to("meta")
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def hook(module: torch.nn.Conv2d, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        key = (tuple(inputs[0].shape), tuple(module.weight.shape), module.stride, module.padding)
        seen.setdefault(key, {"x": tuple(inputs[0].shape), "w": tuple(module.weight.shape), "stride": module.stride,
                              "padding": module.padding, "count": 0})["count"] += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.empty(batch, 3, 224, 224, device="meta"))
    return list(seen.values())


def flops(layer: dict[str, Any], y_shape: tuple[int, ...]) -> float:
    _, c, kh, kw = layer["w"]
    return 2.0 * y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3] * c * kh * kw


def ceiling_tflops(reps: int) -> float:
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    return 2 * n**3 / timed(lambda: a @ b, reps) / 1e9


def torch_heuristic_times(batch: int, reps: int) -> dict[str, list[float]]:
    """torch.nn.functional.conv2d per layer with cudnn.benchmark off (cuDNN's heuristic pick, as for
    ``guess``), TF32 off and on, timed in a fresh process: torch keeps the plan it first ran for a
    layer whatever the flag says later, so here it would reuse the benchmark's pick."""
    times: dict[str, list[float]] = _in_fresh_process("--torch-heuristic-only", batch, reps)
    return times


def _in_fresh_process(flag: str, batch: int, reps: int) -> Any:
    """The JSON this script prints last when run with ``flag``, in a new process."""
    done = subprocess.run([sys.executable, __file__, flag, "--batch", str(batch), "--reps", str(reps)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def _eager_heuristic_only(batch: int, reps: int) -> None:
    """Eager ResNet-50 with cudnn.benchmark off (cuDNN's heuristic pick per layer, torch's default)."""
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model, x = zoo.build("resnet50").cuda(), zoo.sample_input("resnet50", batch).cuda()
    with torch.no_grad():
        print(json.dumps({"eager_ms": timed(lambda: model(x), reps)}))


def _torch_heuristic_only(batch: int, reps: int) -> None:
    torch.backends.cudnn.benchmark = False
    times = {}
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        row = []
        for layer in resnet50_layers(batch):
            x, w = torch.randn(layer["x"], device="cuda"), torch.randn(layer["w"], device="cuda") * 0.05
            row.append(timed(lambda: F.conv2d(x, w, stride=layer["stride"], padding=layer["padding"]), reps))
        times["tf32" if tf32 else "fp32"] = row
    print(json.dumps(times))


def bench_layer(layer: dict[str, Any], tf32: bool, reps: int) -> dict[str, Any]:
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    algoswap_cuda.set_tf32(tf32)
    x = torch.randn(layer["x"], device="cuda")
    w = torch.randn(layer["w"], device="cuda") * 0.05
    stride, padding = layer["stride"], layer["padding"]
    ref = F.conv2d(x.double(), w.double(), stride=stride, padding=padding)
    row: dict[str, Any] = {"torch": timed(lambda: F.conv2d(x, w, stride=stride, padding=padding), reps)}
    registry = algoswap.registry()
    attrs = {"stride": stride, "padding": padding}
    call = registry.spec("conv2d").bind([layer["x"], layer["w"], None], ["float32", "float32", None], attrs)
    xc, wc = cp.from_dlpack(x), cp.from_dlpack(w)
    row["errors"] = {}
    for algorithm in ALGORITHMS:
        impl = registry.impls[("conv2d", algorithm, "cuda")]
        answer = impl.check(call)
        if answer is not True:
            row[algorithm] = None
            continue
        fn = impl.callable
        kwargs = dict(call.attrs)
        out = fn(xc, wc, None, **kwargs)
        row["errors"][algorithm] = float(torch.linalg.norm(torch.from_dlpack(out).double() - ref) / torch.linalg.norm(ref))
        row[algorithm] = timed(lambda: fn(xc, wc, None, **kwargs), reps)
        if algorithm in ("guess", "find"):
            row[f"{algorithm}_kernel"] = impl.kernel_name(call)
    row["flops"] = flops(layer, tuple(ref.shape))
    return row


def whole_model(batch: int, reps: int, algorithms: tuple[str, ...] = ("guess", "find")) -> dict[str, Any]:
    """ResNet-50 inference: eager PyTorch, swap_conv2d (each of ``algorithms``), and swap_backend
    (CUDA inputs stay in GPU memory between steps) with default requests, with cuda:find for every
    conv2d, and unfused; each timed like a layer. Eager runs with cudnn.benchmark on (and, in a fresh
    process, off: ``eager_heuristic_ms``)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    algoswap_cuda.set_tf32(False)
    model = zoo.build("resnet50").cuda()
    x = zoo.sample_input("resnet50", batch).cuda()
    out: dict[str, Any] = {}

    def error(got: torch.Tensor) -> float:
        return float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))

    with torch.no_grad():
        expected = model(x)
        out["eager_ms"] = timed(lambda: model(x), reps)
        out["eager_heuristic_ms"] = _in_fresh_process("--eager-heuristic-only", batch, reps)["eager_ms"]
        for algorithm in algorithms:
            swapped = algoswap.swap_conv2d(zoo.build("resnet50").cuda(), f"cuda:{algorithm}")
            out[f"swap_conv2d_{algorithm}_error"] = error(swapped(x))
            out[f"swap_conv2d_{algorithm}_ms"] = timed(lambda: swapped(x), reps)
    variants = {"swap_backend": (None, True), "swap_backend_find": ({"conv2d": "cuda:find"}, True),
                "swap_backend_unfused": (None, False)}
    for label, (algos, fuse) in variants.items():
        try:
            out.update(_converted(label, algos, fuse, x, expected, reps))
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            out[f"{label}_error"] = f"{type(exc).__name__}: {exc}"
        if f"{label}_ms" in out:
            out[f"{label}_vs_eager"] = out[f"{label}_ms"] / out["eager_ms"]
            out[f"{label}_vs_eager_heuristic"] = out[f"{label}_ms"] / out["eager_heuristic_ms"]
    return out


def _converted(label: str, algos: Any, fuse: bool, x: torch.Tensor, expected: torch.Tensor, reps: int) -> dict[str, Any]:
    """One swap_backend conversion of ResNet-50 (default requests, or ``algos``; fused or not), timed."""
    out: dict[str, Any] = {}
    start = time.perf_counter()
    with torch.no_grad():
        converted = algoswap.swap_backend(zoo.build("resnet50").cuda(), algos, sample_input_shape=tuple(x.shape), fuse=fuse)
        got = converted(x)
    out[f"{label}_error"] = float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))
    out[f"{label}_first_call_s"] = time.perf_counter() - start  # conversion and selection included
    rows = converted.explain()
    out[f"{label}_backends"] = converted.backends()
    out[f"{label}_moves"] = [row.name for row in rows if "inputs moved" in row.note]
    out[f"{label}_steps"] = len(rows)
    out[f"{label}_fused"] = sum("+" in row.op for row in rows)
    with torch.no_grad():
        torch.cuda.synchronize()
        start = time.perf_counter()
        converted(x)
        torch.cuda.synchronize()
        slow = time.perf_counter() - start > 0.2  # host round trips: time a few single calls, not 130
        out[f"{label}_ms"] = timed(lambda: converted(x), 3 if slow else reps, 1 if slow else 3, 1 if slow else 10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default="")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--torch-heuristic-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--eager-heuristic-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plot", default="", help="write a per-layer chart of the ratios to this PNG file")
    parser.add_argument("--from-json", default="", help="no GPU needed: print and plot the results saved by --out")
    parser.add_argument("--model-only", action="store_true", help="only whole ResNet-50 (eager, swap_conv2d, swap_backend)")
    parser.add_argument("--algorithms", nargs="*", default=["guess", "find"], help="swap_conv2d algorithms for the whole model")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        for mode, run in saved["runs"].items():
            print_table(saved["layers"], run["rows"], mode == "tf32", run["ceiling_tflops"])
        if args.plot:
            plot(saved, args.plot)
        return 0
    if args.torch_heuristic_only or args.eager_heuristic_only:
        (_torch_heuristic_only if args.torch_heuristic_only else _eager_heuristic_only)(args.batch, args.reps)
        return 0
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()})  cupy {cp.__version__}")
    if args.model_only:
        model = whole_model(args.batch, args.reps, tuple(args.algorithms))
        print("ResNet-50 inference, batch", args.batch, "(TF32 off):", json.dumps(model, indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"model": model}, f, indent=1, default=str)
        return 0
    layers = resnet50_layers(args.batch)
    heuristic = torch_heuristic_times(args.batch, args.reps)
    results: dict[str, Any] = {"layers": layers, "runs": {}}
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ceiling = ceiling_tflops(args.reps)
        rows = [bench_layer(layer, tf32, args.reps) for layer in layers]
        for row, t in zip(rows, heuristic["tf32" if tf32 else "fp32"]):
            row["torch_heuristic"] = t
        results["runs"]["tf32" if tf32 else "fp32"] = {"ceiling_tflops": ceiling, "rows": rows}
        print_table(layers, rows, tf32, ceiling)
    if not args.skip_model:
        results["model"] = whole_model(args.batch, args.reps, tuple(args.algorithms))
        print("\nResNet-50 inference, batch", args.batch, "(TF32 off):", json.dumps(results["model"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if args.plot:
        plot(results, args.plot)
    return 0


def _label(layer: dict[str, Any]) -> str:
    return f"{layer['x'][1]}x{layer['x'][2]}² {layer['w'][2]}x{layer['w'][3]}/{layer['stride'][0]} ->{layer['w'][0]} x{layer['count']}"


def plot(results: dict[str, Any], path: str) -> None:
    """Per layer: guess, find, the best of ours and torch's heuristic pick, over torch with cudnn.benchmark."""
    from layer_plot import ratio_panels

    labels = [_label(layer) for layer in results["layers"]]
    panels = []
    for mode, run in results["runs"].items():
        rows = run["rows"]
        best = [min(row[a] for a in ALGORITHMS if row[a] is not None) for row in rows]
        series = {"guess": [r["guess"] / r["torch"] if r["guess"] else None for r in rows],
                  "find": [r["find"] / r["torch"] if r["find"] else None for r in rows],
                  "best of ours": [b / r["torch"] for b, r in zip(best, rows)],
                  "torch, cudnn.benchmark off": [r["torch_heuristic"] / r["torch"] for r in rows]}
        panels.append((f"ResNet-50 conv layers, batch {results['layers'][0]['x'][0]}, float32, TF32 {'on' if mode == 'tf32' else 'off'}: "
                       "time / torch with cudnn.benchmark", labels, series))
    ratio_panels(panels, path, "time / torch", target=1.05)


def print_table(layers: list[dict[str, Any]], rows: list[dict[str, Any]], tf32: bool, ceiling: float) -> None:
    short = {"implicit_gemm": "igemm", "implicit_precomp_gemm": "ipgemm", "winograd_nonfused": "wino_nf", "fft_tiling": "fft_t"}
    names = [short.get(a, a) for a in ALGORITHMS]
    print(f"\n== ResNet-50 conv layers, batch {layers[0]['x'][0]}, float32, TF32 {'on' if tf32 else 'off'}: "
          f"torch ms, then ours / torch (cuBLAS ceiling {ceiling:.1f} TFLOP/s)")
    print(f"{'layer':<34}{'torch':>8}{'t_heur':>8}" + "".join(f"{n:>9}" for n in names) + f"{'best':>9}{'TFLOP/s':>9}")
    guess_ratios, best_ratios, heuristic_ratios = [], [], []
    for layer, row in zip(layers, rows):
        label = _label(layer)
        ratios = {a: (row[a] / row["torch"] if row[a] is not None else None) for a in ALGORITHMS}
        best = min(r for r in ratios.values() if r is not None)
        guess_ratios.append(ratios["guess"])
        best_ratios.append(best)
        if row["guess"] is not None:
            heuristic_ratios.append(row["guess"] / row["torch_heuristic"])
        fastest = min(t for t in (row[a] for a in ALGORITHMS) if t is not None)
        cells = "".join(f"{'-':>9}" if r is None else f"{r:9.2f}" for r in ratios.values())
        print(f"{label:<34}{row['torch']:8.3f}{row['torch_heuristic'] / row['torch']:8.2f}{cells}{best:9.2f}"
              f"{row['flops'] / fastest / 1e9:9.1f}")
    guesses = [r for r in guess_ratios if r is not None]
    print(f"guess / torch: median {statistics.median(guesses):.2f}, worst {max(guesses):.2f};  "
          f"best / torch: median {statistics.median(best_ratios):.2f}, worst {max(best_ratios):.2f}")
    print(f"guess / torch with cudnn.benchmark off (t_heur: cuDNN's heuristics on both sides): median "
          f"{statistics.median(heuristic_ratios):.2f}, worst {max(heuristic_ratios):.2f}")
    largest = sorted(zip(layers, rows), key=lambda lr: -lr[1]["flops"])[:3]
    for layer, row in largest:
        fastest = min((row[a], a) for a in ALGORITHMS if row[a] is not None)
        print(f"  largest {layer['x']} * {layer['w']}: {row['flops'] / 1e9:.1f} GFLOP, torch {row['flops'] / row['torch'] / 1e9:.1f} "
              f"TFLOP/s, ours best ({fastest[1]}) {row['flops'] / fastest[0] / 1e9:.1f} TFLOP/s = "
              f"{row['flops'] / fastest[0] / 1e9 / ceiling:.0%} of the ceiling")


if __name__ == "__main__":
    sys.exit(main())
