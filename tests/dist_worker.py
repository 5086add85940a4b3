"""What one rank runs under torchrun for tests/test_dist.py: ``torchrun ... tests/dist_worker.py SCENARIO OUTDIR``.

Each scenario runs its checks and writes ``OUTDIR/<scenario>_rank<r>.json``: a list of [name, ok, detail];
test_dist.py asserts on them. Data are drawn from ``numpy.random.default_rng(seed + rank)``, so every rank
can compute every other rank's arrays and the expected results in NumPy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algoswap import dist, graph as g  # noqa: E402

Checks = list[list[Any]]


def close(got: Any, expected: Any, tolerance: float = 0.0) -> tuple[bool, str]:
    """Equal (tolerance 0) or within a relative error of ``tolerance``; the detail says by how much."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return False, f"shape {got.shape}, expected {expected.shape}"
    error = float(np.max(np.abs(got - expected), initial=0.0) / max(float(np.max(np.abs(expected), initial=0.0)), 1e-300))
    return (error <= tolerance if tolerance else bool(np.array_equal(got, expected))), f"relative error {error:.3g}"


def record(checks: Checks, name: str, run: Callable[[], tuple[bool, str]]) -> None:
    try:
        ok, detail = run()
    except Exception as exc:  # a check that raises fails, with its reason
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    checks.append([name, bool(ok), detail])


def draws(seed: int, shape: tuple[int, ...], size: int, dtype: str = "float64") -> list[np.ndarray]:
    """Every rank's array: rank r's from default_rng(seed + r)."""
    arrays = [np.random.default_rng(seed + r).standard_normal(shape) for r in range(size)]
    return [(a * 10).astype(dtype) if dtype.startswith("int") else a.astype(dtype) for a in arrays]


def collectives(world: dist.World) -> Checks:
    """Every comm op against NumPy, in float64 and int64, in the world and in a group of two ranks."""
    import algoswap

    r, n, checks = world.rank, world.size, []
    ops = algoswap.ops
    for dtype in ("float64", "int64"):
        xs = draws(1, (3, 4), n, dtype)
        tol = 1e-14 if dtype == "float64" else 0.0
        for reduction, expected in (("sum", sum(xs)), ("max", np.max(xs, axis=0)), ("min", np.min(xs, axis=0))):
            record(checks, f"allreduce {reduction} {dtype}", lambda: close(ops.allreduce(xs[r], reduction=reduction), expected, tol))
        record(checks, f"allgather axis -1 {dtype}", lambda: close(ops.allgather(xs[r], axis=-1), np.concatenate(xs, axis=-1)))
        record(checks, f"broadcast root 1 {dtype}", lambda: close(ops.broadcast(xs[r], root=1), xs[1]))
        ys = draws(2, (2, 2 * n, 3), n, dtype)
        record(checks, f"reduce_scatter axis 1 {dtype}", lambda: close(ops.reduce_scatter(ys[r], axis=1), np.split(sum(ys), n, axis=1)[r], tol))
        record(checks, f"all_to_all axis 1 {dtype}", lambda: close(
            ops.all_to_all(ys[r], axis=1), np.concatenate([np.split(y, n, axis=1)[r] for y in ys], axis=1)))
        record(checks, f"sendrecv ring {dtype}", lambda: close(
            ops.sendrecv(xs[r], send_to=(r + 1) % n, recv_from=(r - 1) % n), xs[(r - 1) % n]))
    xs = draws(3, (5,), n)
    record(checks, "allreduce mean", lambda: close(ops.allreduce(xs[r], reduction="mean"), sum(xs) / n, 1e-14))
    record(checks, "allreduce_start + comm_wait", lambda: close(ops.comm_wait(ops.allreduce_start(xs[r], reduction="mean")), sum(xs) / n, 1e-14))
    record(checks, "broadcast_grad: the sum on the root", lambda: close(ops.broadcast_grad(xs[r], root=1), sum(xs) if r == 1 else 0 * xs[r], 1e-14))
    record(checks, "allreduce_grad (max): to the ranks holding the maximum", lambda: _max_grad(xs, r))
    pair = dist.new_group("pair", [n - 1, 0])  # every rank creates it, members or not
    if pair.rank >= 0:
        members = [xs[0], xs[n - 1]]
        record(checks, "allreduce in a group of two", lambda: close(ops.allreduce(xs[r], group="pair"), sum(members), 1e-14))
        record(checks, "allgather in a group of two", lambda: close(ops.allgather(xs[r], group="pair"), np.concatenate(members)))
    record(checks, "gradients through allreduce and allgather", lambda: _gradients(world))
    record(checks, "send and recv nodes, and their gradients", lambda: _send_recv(world))
    return checks


def _max_grad(xs: list[np.ndarray], r: int) -> tuple[bool, str]:
    import algoswap

    top = np.max(xs, axis=0)
    grads = draws(4, (5,), len(xs))
    holders = sum((x == top).astype(float) for x in xs)
    expected = np.where(xs[r] == top, sum(grads) / holders, 0.0)
    return close(algoswap.ops.allreduce_grad(grads[r], xs[r], top, reduction="max"), expected, 1e-14)


def _gradients(world: dist.World) -> tuple[bool, str]:
    """L = sum over ranks of <c_r, allreduce(x_r)> + <d_r, allgather(x_r)>: dL/dx_r = sum c + (sum d)'s part r."""
    r, n = world.rank, world.size
    cs, ds, xs = draws(5, (4,), n), draws(6, (4 * n,), n), draws(7, (4,), n)
    x = g.parameter("x", xs[r])
    loss = g.reduce_sum(g.allreduce(x) * g.constant(cs[r])) + g.reduce_sum(g.allgather(x) * g.constant(ds[r]))
    (grad,) = g.gradients(loss, [x])
    value = g.Executor([grad]).run()[0]
    return close(value, sum(cs) + np.split(sum(ds), n)[r], 1e-14)


def _send_recv(world: dist.World) -> tuple[bool, str]:
    """Rank 0 sends w0 * x to rank 1, which computes L = sum(w1 * received) and sends dL/d(received) back:
    rank 0's gradient of w0, w1 * x, comes back through the gradient of its send."""
    r = world.rank
    if r > 1:
        return True, "ranks 0 and 1 only"
    x, w0, w1 = draws(8, (3,), 3)
    if r == 0:
        weight = g.parameter("w0", w0)
        sent = dist.send(weight * g.constant(x), to=1)
        (grad,) = g.gradients(sent, [weight])  # the send, then the receipt of its gradient
        return close(g.Executor([grad]).run()[0], w1 * x, 1e-15)
    like = g.placeholder("like", (3,), "float64")
    received = dist.recv(like, source=0)
    loss = g.reduce_sum(received * g.parameter("w1", w1))
    (grad_received,) = g.gradients(loss, [received])
    value = g.Executor([loss, dist.send(grad_received, to=0)]).run(feed={like: np.zeros(3)})[0]
    return close(value, np.sum(w0 * x * w1), 1e-15)


def failing(world: dist.World, out: Path) -> Checks:
    """Rank 1 dies and rank 2 hangs before the second collective of a group whose collectives time out after
    5 s (the world's timeout leaves the ranks time to start): rank 0 writes the error it gets and how long it took."""
    dist.new_group("quick", range(world.size), timeout=5.0)
    x = g.placeholder("x", (4,), "float64")
    total = g.allreduce(x, name="total_loss", group="quick")
    ex = g.Executor([total])
    ex.run(feed={x: np.ones(4)})
    if world.rank == 1:
        os._exit(3)
    if world.rank == 2:
        time.sleep(120)
    started = time.monotonic()
    try:
        ex.run(feed={x: np.ones(4)})
        message = "no error"
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
    (out / "failing_error.json").write_text(json.dumps({"message": message, "seconds": time.monotonic() - started}))
    os._exit(1)


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    timeout = float(os.environ.get("ALGOSWAP_TEST_DIST_TIMEOUT", "60"))
    world = dist.init(timeout=timeout, failure_wait=2.0)
    if scenario == "failing":
        failing(world, out)
    import dist_training
    import dist_torch

    runs: dict[str, Callable[[], Checks]] = {
        "collectives": lambda: collectives(world),
        "training": lambda: dist_training.training(world, out),
        "restart": lambda: dist_training.restart(world, out),
        "torch": lambda: dist_torch.swapped_models(world),
    }
    checks: Checks = []
    for name in scenario.split("+"):
        checks += runs[name]()
    (out / f"{scenario}_rank{world.rank}.json").write_text(json.dumps({"attempt": world.attempt, "checks": checks}))
    dist.shutdown()


if __name__ == "__main__":
    main()
