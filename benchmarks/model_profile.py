"""Where a swap_backend model's time goes on the CPU, next to ONNX Runtime's per-node profile of the same
model: the two run in turns in one process, and every step (ours) and node (ORT's) is timed per run;
medians over the runs are compared.

    .venv/bin/python benchmarks/model_profile.py --models densenet121 --batch 1 [--runs 20] [--threads 1]
    .venv/bin/python benchmarks/model_profile.py --models resnet18 --cprofile        # the Python side
    .venv/bin/python benchmarks/model_profile.py --models resnet18 --onednn-verbose  # kernels and reorders

Printed per model: our time per run and the sum of the step medians (the rest is the executor's own
Python work between steps), each kind of step against ORT's kinds, then every convolution (ours matched
with ORT's Conv of the same input, weight and output shapes, in order). ORT turns a batch norm it cannot
fold into a depthwise 1x1 "Conv" of its blocked layout (with the ReLU after it fused): those are listed as
"BatchNormalization (as Conv)"; ORT pads small channel counts to its block size, so such convolutions find no
match ("nan"). ``--onednn-verbose`` runs the model again in a child process with
ONEDNN_VERBOSE=1 and sums oneDNN's own timings by primitive and implementation (reorders show there).
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp

import argparse
import collections
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import models  # noqa: E402  (sets OMP_NUM_THREADS from --threads before torch loads)
import torch  # noqa: E402

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from algoswap.graph._program import Program  # noqa: E402

Signature = tuple[tuple[int, ...], ...]  # input, weight and output shapes of a convolution


class StepTimes:
    """Wraps every step of ``program`` so that each run's time per step is recorded (by step index)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.times: dict[int, list[float]] = collections.defaultdict(list)
        for index, step in enumerate(program.steps):
            if step.runner is not None:
                step.runner = self._timed_runner(step.runner, index)  # type: ignore[assignment]
            else:
                step.fn = self._timed(step.fn, index)

    def _timed(self, fn: Callable[..., Any], index: int) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            self.times[index].append((time.perf_counter() - start) * 1e3)
            return result

        return run

    def _timed_runner(self, runner: Any, index: int) -> Any:
        class Timed:
            selection = runner.selection
            run = staticmethod(self._timed(runner.run, index))

        return Timed()

    def median(self, index: int) -> float:
        return statistics.median(self.times[index]) if self.times[index] else 0.0


def ort_node_times(path: str) -> list[dict[str, Any]]:
    """ORT's profile as nodes in order of execution: name, op, shapes, and the median ms per run."""
    events = json.load(open(path))
    nodes: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        args = event["args"]
        node = nodes.setdefault(event["name"], {"name": event["name"][: -len("_kernel_time")], "op": args["op_name"],
                                                "inputs": _shapes(args["input_type_shape"]),
                                                "output": _shapes(args["output_type_shape"]), "times": []})
        node["times"].append(event["dur"] / 1e3)
    for node in nodes.values():
        node["ms"] = statistics.median(node["times"])
        if node["op"] == "Conv" and len(node["inputs"]) > 1 and _is_batch_norm_conv(node):
            node["op"] = "BatchNormalization (as Conv)"
    return list(nodes.values())


def _shapes(typed: list[dict[str, list[int]]]) -> list[tuple[int, ...]]:
    return [tuple(next(iter(t.values()))) for t in typed]


def _is_batch_norm_conv(node: dict[str, Any]) -> bool:
    """A per-channel scale as ORT's NCHWc transformer writes a batch norm: weight (C, 1, 1, 1), input C channels."""
    weight = node["inputs"][1]
    return len(weight) == 4 and weight[1:] == (1, 1, 1) and weight[0] == node["inputs"][0][1] > 1


def profile(name: str, batch: int, runs: int, threads: int) -> None:
    module, x = zoo.build(models.qualified(name), num_classes=1000), zoo.sample_input(models.qualified(name), batch)
    converted = algoswap.swap_backend(module, None, tuple(x.shape), fallback="torch")
    session = models.onnx_session(module, x, threads, profile=f"/tmp/ort_profile_{name}_{batch}")
    ort = models.onnx_run(session, x)
    program = converted.program
    assert program is not None
    steps = StepTimes(program)
    totals: list[float] = []
    with torch.inference_mode():
        for _ in range(runs):
            start = time.perf_counter()
            converted(x)
            totals.append((time.perf_counter() - start) * 1e3)
            ort()
    nodes = ort_node_times(session.end_profiling())
    ort_total = sum(n["ms"] for n in nodes)
    ours = statistics.median(totals)
    summed = sum(steps.median(i) for i in range(len(program.steps)))
    print(f"\n{name} batch {batch}, {threads} thread(s), median of {runs} runs in turns with ORT: swap_backend "
          f"{ours:.2f} ms/run ({len(program.steps)} steps, their medians sum to {summed:.2f} ms); ORT's nodes sum to "
          f"{ort_total:.2f} ms ({len(nodes)} nodes)")
    _by_kind(program, steps, nodes)
    _by_convolution(program, steps, nodes)


def _by_kind(program: Program, steps: StepTimes, nodes: list[dict[str, Any]]) -> None:
    ours: dict[str, list[float]] = collections.defaultdict(list)
    for index, step in enumerate(program.steps):
        ours[f"{step.op} ({step.backend or step.kind})"].append(steps.median(index))
    theirs: dict[str, list[float]] = collections.defaultdict(list)
    for node in nodes:
        theirs[node["op"]].append(node["ms"])
    left = sorted(ours.items(), key=lambda item: -sum(item[1]))
    right = sorted(theirs.items(), key=lambda item: -sum(item[1]))
    print(f"  {'swap_backend step':<34} {'n':>4} {'ms':>8}   {'ONNX Runtime node':<30} {'n':>4} {'ms':>8}")
    for row in range(max(len(left), len(right))):
        a = f"{left[row][0]:<34} {len(left[row][1]):>4} {sum(left[row][1]):8.2f}" if row < len(left) else " " * 48
        b = f"{right[row][0]:<30} {len(right[row][1]):>4} {sum(right[row][1]):8.2f}" if row < len(right) else ""
        print(f"  {a}   {b}")


def _by_convolution(program: Program, steps: StepTimes, nodes: list[dict[str, Any]]) -> None:
    """Each convolution step next to ORT's Conv of the same shapes (the k-th of a signature with the k-th)."""
    theirs: dict[Signature, list[dict[str, Any]]] = collections.defaultdict(list)
    for node in nodes:
        if node["op"] == "Conv":
            theirs[(node["inputs"][0], node["inputs"][1], node["output"][0])].append(node)
    print(f"  {'convolution':<30} {'input':<18} {'weight':<18} {'ours ms':>8} {'ORT ms':>7} {'ratio':>6}  our kernel")
    total = [0.0, 0.0]
    for index, step in enumerate(program.steps):
        if not step.op.startswith("conv2d") or step.node is None:
            continue
        weight = tuple(step.node.inputs[1].shape) if step.members == () else tuple(step.members[0].inputs[1].shape)
        signature = (tuple(step.input_shape or ()), weight, tuple(step.shape))
        match = theirs[signature].pop(0) if theirs.get(signature) else None
        mine = steps.median(index)
        other = match["ms"] if match else float("nan")
        total[0] += mine
        total[1] += other if match else 0.0
        print(f"  {step.name[:30]:<30} {str(signature[0]):<18} {str(weight):<18} {mine:8.3f} {other:7.3f} "
              f"{mine / other:6.2f}  {step.kernel}")
    print(f"  {'all convolutions':<68} {total[0]:8.2f} {total[1]:7.2f} {total[0] / max(total[1], 1e-9):6.2f}")


def python_profile(name: str, batch: int, runs: int) -> None:
    """cProfile of ``runs`` calls of the swap_backend model: the functions with the most time of their own."""
    module, x = zoo.build(models.qualified(name), num_classes=1000), zoo.sample_input(models.qualified(name), batch)
    converted = algoswap.swap_backend(module, None, tuple(x.shape), fallback="torch")
    converted(x)
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [converted(x) for _ in range(runs)])
    print(f"\n{name} batch {batch}: cProfile of {runs} calls")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def onednn_verbose(name: str, batch: int, runs: int) -> None:
    """oneDNN's own timings of every primitive of ``runs`` calls (a child process with ONEDNN_VERBOSE=1)."""
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import model_profile; "
            f"model_profile._run_quietly({name!r}, {batch}, {runs})")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ONEDNN_VERBOSE": "1"},
                          capture_output=True, text=True, check=True)
    start = done.stdout.find("=== timed ===")
    totals: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    for line in done.stdout[start:].splitlines():
        fields = line.split(",")
        if len(fields) > 5 and fields[0] == "onednn_verbose" and fields[1] == "exec":
            kind, impl, layouts = fields[3], fields[4], fields[6] if _has_layouts(fields) else ""
            totals[(kind, impl, _layout_summary(layouts))].append(float(fields[-1]))
    print(f"\n{name} batch {batch}: oneDNN primitives over {runs} calls (ONEDNN_VERBOSE=1), per call")
    print(f"  {'primitive':<26} {'implementation':<28} {'memory (src dst)':<34} {'n':>5} {'ms':>8}")
    for (kind, impl, layouts), times in sorted(totals.items(), key=lambda item: -sum(item[1])):
        print(f"  {kind:<26} {impl:<28} {layouts:<34} {len(times) // runs:>5} {sum(times) / runs:8.3f}")


def _has_layouts(fields: list[str]) -> bool:
    return len(fields) > 6 and "src" in fields[6]


def _layout_summary(text: str) -> str:
    """"src_f32::blocked:acdb::f0 wei_f32:... dst_f32::blocked:aBcd16b::f0" -> "acdb aBcd16b" (repeats counted)."""
    tags = [part.split(":")[3] for part in text.split() if part.startswith(("src", "dst")) and part.count(":") >= 3]
    counted = collections.Counter(tags)
    return " ".join(tag if counted[tag] == 1 else f"{tag}x{counted[tag]}" for tag in dict.fromkeys(tags))


def _run_quietly(name: str, batch: int, runs: int) -> None:
    module, x = zoo.build(models.qualified(name), num_classes=1000), zoo.sample_input(models.qualified(name), batch)
    converted = algoswap.swap_backend(module, None, tuple(x.shape), fallback="torch")
    converted(x)
    print("=== timed ===", flush=True)
    for _ in range(runs):
        converted(x)
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "densenet121"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=models.THREADS, help="ORT intra-op threads and OMP_NUM_THREADS")
    parser.add_argument("--cprofile", action="store_true", help="cProfile of the Python side instead")
    parser.add_argument("--onednn-verbose", action="store_true", help="oneDNN's per-primitive timings instead")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, load {os.getloadavg()[0]:.1f}")
    for name in args.models:
        for batch in args.batch:
            if args.cprofile:
                python_profile(name, batch, args.runs)
            elif args.onednn_verbose:
                onednn_verbose(name, batch, args.runs)
            else:
                profile(name, batch, args.runs, args.threads)


if __name__ == "__main__":
    main()
