"""The executor's cost per node, and a training step against PyTorch.

    OMP_NUM_THREADS=1 python benchmarks/executor_overhead.py [--nodes 400] [--repeats 30]
    python3 benchmarks/executor_overhead.py --backend cuda --no-training   # the engine on the GPU

On a shared 2-core machine, give every library one thread: PyTorch's and oneDNN's OpenMP threads
spin while waiting and, with other work running, a step of PyTorch took 220 ms instead of 1.6 ms.

1. Overhead: a chain of cheap nodes (add_scalar on 16 floats) run by ``Executor.run`` against the same
   implementations called directly in a Python loop, and against ``algoswap.ops.call`` per node.
   (executor - direct) / nodes is what the executor adds per node: argument gathering, the
   Runner's checks, freeing buffers. ``--backend cuda`` runs the chain on the GPU (the input fed as
   a CuPy array, every node on cuda; the GPU is synchronised once per run, so what is timed is the
   host's cost of launching 400 tiny kernels, through the executor or directly).
2. A training step of the digits CNN (examples/train_digits.py, batch 32): the executor with the
   registry's choice, with NumPy only, and PyTorch (same network, forward + backward + Adam).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import algoswap
from algoswap import graph as g


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The median of ``repeats`` timings (after one warm-up run)."""
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def overhead(nodes: int, repeats: int, backend: str) -> None:
    x = g.placeholder("x", (16,))
    y = x
    for _ in range(nodes):
        y = g.add_scalar(y, value=1.0)
    executor = g.Executor([y], backends=[backend])
    value: Any = np.ones(16, np.float32)
    sync: Callable[[], None] = lambda: None  # noqa: E731
    if backend == "cuda":
        import cupy

        value, sync = cupy.asarray(value), cupy.cuda.Device().synchronize
    feed = {x: value}
    program = executor.plan(feed=feed)
    steps = [(s.fn, s.attrs) for s in program.steps if s.runner is not None]  # not the output's move to the host

    def direct() -> Any:
        out = value
        for fn, attrs in steps:
            out = fn(out, **attrs)
        return out

    def through_ops() -> Any:
        out = value
        for _ in range(nodes):
            out = algoswap.ops.call("add_scalar", out, value=1.0, algorithm=f"{backend}:default")
        return out

    def synchronised(run: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: (run(), sync())

    if not all(s.backend == backend for s in program.steps if s.runner is not None):
        raise SystemExit(f"not every node ran on {backend}: {executor.explain(feed=feed)}")
    out = direct()
    assert np.array_equal(executor.run(feed=feed)[0], out.get() if backend == "cuda" else out)
    t_exec = best_seconds(synchronised(lambda: executor.run(feed=feed)), repeats)
    t_direct = best_seconds(synchronised(direct), repeats)
    t_ops = best_seconds(through_ops, repeats) if backend != "cuda" else float("nan")  # ops.call takes host arrays
    per = lambda t: t / nodes * 1e6  # noqa: E731
    print(f"chain of {nodes} add_scalar nodes (16 floats) on {backend}, median of {repeats}:")
    print(f"  implementations called directly   {per(t_direct):6.2f} us/node")
    print(f"  Executor.run                      {per(t_exec):6.2f} us/node")
    print(f"  algoswap.ops.call per node        {per(t_ops):6.2f} us/node")
    print(f"  executor overhead                 {per(t_exec - t_direct):6.2f} us/node (target < 10)")


def training_step(repeats: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import train_digits

    data = train_digits.load(0)
    rows: list[tuple[str, float]] = []
    for label, backends in (("executor, registry's choice", None), ("executor, numpy only", ["numpy"])):
        loader = g.DataLoader(data[0], data[2], batch_size=32, seed=0)
        x, y = g.dataloader_op({"train": loader})
        loss = g.softmax_cross_entropy(train_digits.build(train_digits.initial_weights(0), x), y)
        executor = g.Executor({"train": [loss, g.Adam(0.005).minimize(loss)]}, backends=backends)
        rows.append((label, best_seconds(lambda: executor.run("train"), repeats)))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        model = train_digits.torch_network(0)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
        loader = g.DataLoader(data[0], data[2], batch_size=32, seed=0)

        def torch_step() -> None:
            xb, yb = loader.next_batch()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
            optimizer.step()

        rows.append(("pytorch", best_seconds(torch_step, repeats)))
    reference = rows[-1][1]
    print(f"digits CNN training step (batch 32, Adam), median of {repeats}:")
    for label, seconds in rows:
        print(f"  {label:30s} {seconds * 1e3:7.2f} ms  ({seconds / reference:.2f}x pytorch)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--backend", default="numpy", help="the backend of every node of the chain (numpy, dnnl, cuda)")
    parser.add_argument("--no-training", action="store_true", help="skip the training step")
    args = parser.parse_args()
    overhead(args.nodes, args.repeats, args.backend)
    if not args.no_training:
        training_step(args.repeats)


if __name__ == "__main__":
    main()
