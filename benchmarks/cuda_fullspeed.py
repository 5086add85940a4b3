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
each of --layer-requests, each call timed (at batch 32 a swapped layer is host-bound: 11-23 TFLOP/s on the
H200); then the same layer captured once as a CUDA graph and replayed, torch's module and each requested cuda
implementation on CuPy views of the same tensors, which times the kernels alone; TFLOP/s and the share of
the ceiling (target: >= 50%).

A run fits a device command of 10 minutes: --budget SECONDS (default 450) skips a compile column
whose expected compile time no longer fits and then whole configurations, and says which. Progress
goes to stderr (a line per configuration as it starts, a line per way as it is measured); the
tables (markdown) to stdout at the end; --json is rewritten after every configuration, so that a
run stopped early leaves what it measured. An exception in one cell prints its first line in that
cell and the run goes on.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import Any

from _fullspeed_layers import largest_layers, plot
from _fullspeed_ways import (AUTO, CAPTURE_ENV, COMPILE_MODES, DTYPES, EAGER, HALF, ISSUE_MODELS, SWAP_WAYS, TARGET_OF_CEILING,
                             TARGET_VS_COMPILE, TARGET_VS_EAGER, Budget, Config, compile_modes, env_is_read, failure,
                             first_line, measure, say, tf32_flags)


# ---------------------------------------------------------------------------------------------- plan


def configurations(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(model, batch, dtype) in the order they run: per model and batch (one float64 reference), each dtype."""
    return [(model, batch, dtype) for model in args.models for batch in args.batches for dtype in args.dtypes]


def ways(args: argparse.Namespace) -> list[str]:
    """The columns of every configuration, in the order they are built (the cheap ones first)."""
    return [EAGER] + [SWAP_WAYS[name][0] for name in args.swap] + [f"compile {mode}" for mode in
                                                                              dict.fromkeys(m for b in args.batches for m in compile_modes(args.compile_modes, b))]


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


# ---------------------------------------------------------------------------------------------- output


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
            "capture_env_read": env_is_read()}


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
    parser.add_argument("--compile-modes", nargs="*", choices=COMPILE_MODES + (AUTO,), default=["default"],
                        help="torch.compile columns (default: default; none: no torch.compile; max-autotune takes minutes; "
                             "auto: per batch the mode the issue's table found faster, reduce-overhead up to batch 32, else default)")
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
