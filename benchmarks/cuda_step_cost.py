"""The host's cost per step of a swap_backend model on the GPU, split into the engine's and the
implementations': what decides whether a many-step model (DenseNet-121: 313 steps) keeps the GPU busy.

    python3 benchmarks/cuda_step_cost.py [--models densenet121 convnext_tiny] [--batch 1] [--runs 30]

For each model, at a batch small enough for the host to be the bottleneck:

- *host time per forward*: the time to enqueue one forward (no synchronisation inside; the GPU
  runs behind), against PyTorch eager's the same way, and the synchronised time of both;
- *implementations*: the host time spent inside the implementations' own calls (each step's
  ``Runner.fn`` timed; what CuPy, cuDNN's frontend and cuBLAS cost on the host), per op, in µs per
  call;
- *engine*: the rest, per step: the Model's conversions of its input and output, the program's loop
  (arguments gathered, buffers freed) and the Runner's work around each call (the memory-order
  arrangement, the result's checks). This is the "per-step cost of the engine" of issue 14.

``--sync`` synchronises after each step instead, so that each op's time includes its GPU time (to find
a slow kernel rather than a slow launch). Timing wrappers add about 0.2 µs per step to the implementations' share; the engine's share is the
forward's time less the implementations' (both medians of the same runs).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from typing import Any, Callable

import torch

import algoswap
from algoswap import zoo


class ImplementationTimes:
    """Times the implementation call of every op step of ``program`` (host time, no synchronisation)."""

    def __init__(self, program: Any, synchronise: bool = False) -> None:
        self.synchronise = synchronise
        self.per_run: list[float] = []
        self.per_op: dict[str, list[float]] = collections.defaultdict(list)
        self._run_total = 0.0
        self.steps = len(program.steps)
        for step in program.steps:
            if step.runner is not None:
                step.runner.fn = self._timed(step.runner.fn, step.op)
            else:
                step.fn = self._timed(step.fn, step.kind)

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            if self.synchronise:
                torch.cuda.synchronize()
            spent = time.perf_counter() - start
            self._run_total += spent
            self.per_op[label].append(spent)
            return result

        return run

    def start_run(self) -> None:
        self._run_total = 0.0

    def end_run(self) -> None:
        self.per_run.append(self._run_total)


def host_ms(forward: Callable[[], Any], runs: int, before: Callable[[], None] = lambda: None,
            after: Callable[[], None] = lambda: None) -> tuple[float, float]:
    """Medians over ``runs`` of the enqueue time and of the synchronised time of one forward (ms)."""
    enqueue, total = [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        before()
        start = time.perf_counter()
        forward()
        queued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        after()
        enqueue.append((queued - start) * 1e3)
        total.append((done - start) * 1e3)
    return statistics.median(enqueue), statistics.median(total)


def measure(name: str, batch: int, runs: int, synchronise: bool) -> None:
    module = zoo.build(name if ":" in name else f"torchvision:{name}").cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    model = algoswap.swap_backend(module, fallback="torch")
    with torch.no_grad():
        expected = module(x)
        for _ in range(3):
            module(x)
        eager_queue, eager_total = host_ms(lambda: module(x), runs)
    got = model(x)
    error = float((got - expected).norm() / expected.norm())
    for _ in range(3):
        model(x)
    plain_queue, plain_total = host_ms(lambda: model(x), runs)
    timing = ImplementationTimes(model.program, synchronise)
    queue, _ = host_ms(lambda: model(x), runs, timing.start_run, timing.end_run)
    steps = timing.steps
    inside = statistics.median(timing.per_run) * 1e3
    where = collections.Counter(f"{s.kind} on {s.backend or s.device or '-'}" for s in model.program.steps)
    print(f"\n{name} batch {batch}: {steps} steps ({', '.join(f'{n} {k}' for k, n in where.items())}), relative error {error:.1e}")
    print(f"  host time per forward: eager {eager_queue:.2f} ms (synchronised {eager_total:.2f}); "
          f"swap_backend {plain_queue:.2f} ms (synchronised {plain_total:.2f}, {plain_total / eager_total:.2f}x eager)")
    print(f"  inside implementations {inside:.2f} ms ({inside / steps * 1e3:.1f} us per step); "
          f"engine {queue - inside:.2f} ms: {(queue - inside) / steps * 1e3:.1f} us per step")
    print(f"  {'op':24} {'calls':>6} {'us per call':>12} {'ms per run':>11}")
    per_run = len(timing.per_run)
    for op, times in sorted(timing.per_op.items(), key=lambda item: -sum(item[1])):
        print(f"  {op:24} {len(times) // per_run:6d} {statistics.median(times) * 1e6:12.1f} {sum(times) / per_run * 1e3:11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["densenet121", "convnext_tiny", "mobilenet_v2"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sync", action="store_true",
                        help="synchronise after every step: per-op times include the GPU's (the engine's share is then meaningless)")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    for name in args.models:
        measure(name, args.batch, args.runs, args.sync)


if __name__ == "__main__":
    main()
