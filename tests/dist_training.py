"""Data-parallel training checks for tests/test_dist.py, run on every rank by dist_worker.py: the same network
trained by every rank on its share of each global batch, against single-process training on the global batches
(computed on each rank too, without communication)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

import algoswap
from algoswap import dist, graph as g
from dist_worker import BACKEND, BACKENDS, Checks, close, record

ROWS, TABLE, BATCH, STEPS = 32, 12, 8, 5
OPTIMIZERS: dict[str, Callable[[], g.Optimizer]] = {
    "SGD": lambda: g.SGD(lr=0.1), "Momentum": lambda: g.Momentum(lr=0.1), "Adam": lambda: g.Adam(lr=0.05),
}


def dataset() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(11)
    return rng.integers(0, TABLE, (ROWS, 2)), rng.standard_normal((ROWS, 4)), rng.integers(0, 3, ROWS)


def initial(dtype: str, rank: int = 0) -> dict[str, np.ndarray]:
    """The starting weights; ranks other than 0 start elsewhere (the first run broadcasts rank 0's)."""
    rng = np.random.default_rng(12)
    weights = {"E": rng.standard_normal((TABLE, 3)), "W1": rng.standard_normal((5, 10)) * 0.3, "b1": np.zeros(5),
               "W2": rng.standard_normal((3, 5)) * 0.3, "b2": np.zeros(3)}
    return {k: (v + rank).astype(dtype) for k, v in weights.items()}


class Net:
    """embedding (replicated or row-sharded) and features -> linear -> relu -> linear -> cross-entropy."""

    def __init__(self, dtype: str, table: str, optimizer: str, parallel: bool, world: dist.World) -> None:
        ids, feats, labels = dataset()
        make = dist.ShardedLoader if parallel else g.DataLoader
        loader = make(ids, feats.astype(dtype), labels, batch_size=BATCH, seed=0)
        x_ids, x_feats, y = g.dataloader_op({"train": loader})
        start = initial(dtype, world.rank if parallel else 0)
        self.parallel = parallel
        self.sharded = dist.ShardedEmbedding("E", initial(dtype)["E"]) if table == "sharded" and parallel else None
        self.params = {k: g.parameter(k, v) for k, v in start.items() if k != "E" or self.sharded is None}
        vectors = self.sharded(x_ids) if self.sharded is not None else g.embedding(self.params["E"], x_ids)
        h = g.relu(g.linear(g.concat(g.flatten(vectors), x_feats, axis=1), self.params["W1"], self.params["b1"]))
        self.loss = g.softmax_cross_entropy(g.linear(h, self.params["W2"], self.params["b2"]), y)
        chosen = OPTIMIZERS[optimizer]()
        wrapper = dist.DataParallel(chosen, bucket_bytes=200) if parallel else chosen
        self.train = wrapper.minimize(self.loss)
        self.executor = g.Executor({"train": [self.loss, self.train]}, backends=BACKENDS)

    def step(self) -> float:
        value = np.asarray(self.executor.run("train")[0], np.float64)
        return float(algoswap.ops.allreduce(value, reduction="mean")) if self.parallel else float(value)

    def weights(self, world: dist.World) -> dict[str, np.ndarray]:
        found = {k: np.array(v.value) for k, v in self.params.items()}
        if self.sharded is not None:
            shards = algoswap.ops.allgather(self.sharded.weight.value[None], axis=0)
            found["E"] = self.sharded.full_table(list(shards))
        return found


def compare(parallel: Net, single: Net, world: dist.World, tolerance: float, steps: int = STEPS) -> tuple[bool, str]:
    losses = [(parallel.step(), single.step()) for _ in range(steps)]
    got, expected = parallel.weights(world), single.weights(world)
    results = [close(got[k], expected[k], tolerance) for k in expected] + [close([a for a, _ in losses], [b for _, b in losses], tolerance)]
    return all(ok for ok, _ in results), "; ".join(detail for _, detail in results)


def training(world: dist.World, out: Path) -> Checks:
    checks: Checks = []
    cases = [("float64", "replicated", name, 1e-12) for name in OPTIMIZERS] + [("float64", "sharded", "Adam", 1e-12),
                                                                                ("float32", "replicated", "Adam", 1e-6)]
    for dtype, table, optimizer, tolerance in cases:
        record(checks, f"data-parallel {optimizer} {dtype} {table} table = single process",
               lambda: compare(Net(dtype, table, optimizer, True, world), Net(dtype, table, optimizer, False, world), world, tolerance))
    record(checks, "gradient reductions start before the backward pass ends", lambda: _overlap(world))
    record(checks, "checkpoint: save, train, load, train again", lambda: _round_trip(world, out))
    record(checks, "logs and progress on rank 0 only", lambda: _rank_zero(world))
    return checks


def _overlap(world: dist.World) -> tuple[bool, str]:
    net = Net("float64", "replicated", "SGD", True, world)
    steps = net.executor.plan("train").steps
    starts = [i for i, s in enumerate(steps) if s.op == "allreduce_start"]
    backward = [i for i, s in enumerate(steps) if s.op.endswith(("_grad_weight", "_grad_input", "_grad"))]
    waits = [i for i, s in enumerate(steps) if s.op == "comm_wait"]
    served = sorted({steps[i].backend for i in starts})
    ok = len(starts) >= 2 and starts[0] < backward[-1] and min(waits) > backward[-1] and served == [BACKEND]
    return ok, (f"{len(starts)} buckets on {served}; first start at step {starts[0]}, last gradient at {backward[-1]}, "
                f"first wait at {min(waits)}")


def _round_trip(world: dist.World, out: Path) -> tuple[bool, str]:
    net = Net("float64", "sharded", "Adam", True, world)
    path = out / "roundtrip.ckpt"
    net.step()
    dist.save_checkpoint(net.executor, path, extra={"step": 1})
    first = [net.step() for _ in range(2)], net.weights(world)
    extra = dist.load_checkpoint(net.executor, path)
    second = [net.step() for _ in range(2)], net.weights(world)
    same = first[0] == second[0] and all(np.array_equal(first[1][k], second[1][k]) for k in first[1])
    return same and extra == {"step": 1}, f"losses {first[0]} then {second[0]}; extra {extra}"


def _rank_zero(world: dist.World) -> tuple[bool, str]:
    import contextlib
    import io

    printed, logged = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(logged):
        dist.print("hello")
        list(dist.progress(range(3), "steps"))
    expected = world.is_main
    ok = ("hello" in printed.getvalue()) == expected and ("steps" in logged.getvalue()) == expected
    return ok, f"rank {world.rank}: printed {printed.getvalue()!r}, progress {logged.getvalue()!r}"


def restart(world: dist.World, out: Path) -> Checks:
    """Training with a checkpoint every 2 steps; on the first attempt rank 1 dies after step 3; torchrun
    restarts both ranks, which resume from step 2. The result must be single-process training's."""
    steps, path = 6, out / "restart.ckpt"
    net = Net("float64", "sharded", "Adam", True, world)
    done, losses = 0, []
    if path.exists():
        extra = dist.load_checkpoint(net.executor, path)
        done, losses = extra["step"], extra["losses"]
    resumed_at = done
    for step in range(done, steps):
        losses.append(net.step())
        if (step + 1) % 2 == 0:
            dist.save_checkpoint(net.executor, path, extra={"step": step + 1, "losses": losses})
        if world.attempt == 0 and world.rank == 1 and step + 1 == 3:
            os._exit(17)
    checks: Checks = []
    single = Net("float64", "sharded", "Adam", False, world)
    expected = [single.step() for _ in range(steps)]
    record(checks, f"resumed at step {resumed_at} on attempt {world.attempt}", lambda: (resumed_at == 2 and world.attempt == 1, ""))
    record(checks, "losses = an uninterrupted single-process run", lambda: close(losses, expected, 1e-12))
    got, reference = net.weights(world), single.weights(world)
    record(checks, "weights = an uninterrupted single-process run", lambda: close(
        np.concatenate([got[k].ravel() for k in sorted(got)]), np.concatenate([reference[k].ravel() for k in sorted(got)]), 1e-12))
    return checks

