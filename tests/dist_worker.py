"""What one rank runs under torchrun for tests/test_dist.py: ``torchrun ... tests/dist_worker.py SCENARIO OUTDIR``.

Each scenario runs its checks and writes ``OUTDIR/<scenario>_rank<r>.json``: a list of [name, ok, detail];
test_dist.py asserts on them. Data are drawn from ``numpy.random.default_rng(seed + rank)``, so every rank
can compute every other rank's arrays and the expected results in NumPy.

ALGOSWAP_DIST_TEST_BACKEND=nccl runs the same checks on GPUs, one per rank (LOCAL_RANK): the collectives on
CuPy arrays through the nccl backend (each call a graph that an executor runs, every comm node on nccl) and
the executors' graphs on the CUDA backend (NumPy serving what it lacks). Host arrays still go to gloo.
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

import algoswap  # noqa: E402
from algoswap import dist, graph as g  # noqa: E402

Checks = list[list[Any]]
BACKEND = os.environ.get("ALGOSWAP_DIST_TEST_BACKEND", "gloo")
# The executors' backends: the registry's choice for host arrays (gloo), or the GPU's with NumPy for the rest
BACKENDS: list[str] | None = ["cuda", "nccl", "numpy"] if BACKEND == "nccl" else None


class _GraphOps:
    """``algoswap.ops``' calling convention, building graph nodes: ``ops.allreduce(x, reduction="sum")``."""

    def __getattr__(self, name: str) -> Callable[..., g.Node]:
        return lambda *inputs, **attrs: g.op(name, *inputs, **attrs)


def on_backend(build: Callable[..., Any], *arrays: np.ndarray) -> Any:
    """``build(ops, *inputs)``: with gloo, ``ops`` is ``algoswap.ops`` and the inputs the arrays; with nccl, a
    graph of the same calls, run by an executor on CuPy copies of the arrays, whose every comm node must run on
    nccl. The result is a numpy array either way."""
    if BACKEND == "gloo":
        return build(algoswap.ops, *arrays)
    import cupy

    inputs = [g.placeholder(f"input{i}", a.shape, str(a.dtype)) for i, a in enumerate(arrays)]
    executor = g.Executor([build(_GraphOps(), *inputs)], backends=["cuda", "nccl"])
    result = executor.run(feed={node: cupy.asarray(a) for node, a in zip(inputs, arrays)})[0]
    served = {s.backend for s in executor.last.steps if s.kind == "op" and s.op in algoswap.FAMILIES["comm"]}
    if served != {"nccl"}:
        raise AssertionError(f"the comm nodes ran on {sorted(served)}, not on nccl")
    return result


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
    r, n, checks = world.rank, world.size, []
    for dtype in ("float64", "int64"):
        xs = draws(1, (3, 4), n, dtype)
        tol = 1e-14 if dtype == "float64" else 0.0
        for reduction, expected in (("sum", sum(xs)), ("max", np.max(xs, axis=0)), ("min", np.min(xs, axis=0))):
            record(checks, f"allreduce {reduction} {dtype}", lambda: close(
                on_backend(lambda o, x: o.allreduce(x, reduction=reduction), xs[r]), expected, tol))
        record(checks, f"allgather axis -1 {dtype}", lambda: close(
            on_backend(lambda o, x: o.allgather(x, axis=-1), xs[r]), np.concatenate(xs, axis=-1)))
        record(checks, f"broadcast root 1 {dtype}", lambda: close(on_backend(lambda o, x: o.broadcast(x, root=1), xs[r]), xs[1]))
        ys = draws(2, (2, 2 * n, 3), n, dtype)
        record(checks, f"reduce_scatter axis 1 {dtype}", lambda: close(
            on_backend(lambda o, y: o.reduce_scatter(y, axis=1), ys[r]), np.split(sum(ys), n, axis=1)[r], tol))
        record(checks, f"all_to_all axis 1 {dtype}", lambda: close(
            on_backend(lambda o, y: o.all_to_all(y, axis=1), ys[r]), np.concatenate([np.split(y, n, axis=1)[r] for y in ys], axis=1)))
        record(checks, f"sendrecv ring {dtype}", lambda: close(
            on_backend(lambda o, x: o.sendrecv(x, send_to=(r + 1) % n, recv_from=(r - 1) % n), xs[r]), xs[(r - 1) % n]))
    xs = draws(3, (5,), n)
    record(checks, "allreduce mean", lambda: close(on_backend(lambda o, x: o.allreduce(x, reduction="mean"), xs[r]), sum(xs) / n, 1e-14))
    record(checks, "allreduce_start + comm_wait", lambda: close(
        on_backend(lambda o, x: o.comm_wait(o.allreduce_start(x, reduction="mean")), xs[r]), sum(xs) / n, 1e-14))
    record(checks, "broadcast_grad: the sum on the root", lambda: close(
        on_backend(lambda o, x: o.broadcast_grad(x, root=1), xs[r]), sum(xs) if r == 1 else 0 * xs[r], 1e-14))
    record(checks, "allreduce_grad (max): to the ranks holding the maximum", lambda: _max_grad(xs, r))
    if n > 1:
        pair = dist.new_group("pair", [n - 1, 0])  # every rank creates it, members or not
        if pair.rank >= 0:
            members = [xs[0], xs[n - 1]]
            record(checks, "allreduce in a group of two", lambda: close(
                on_backend(lambda o, x: o.allreduce(x, group="pair"), xs[r]), sum(members), 1e-14))
            record(checks, "allgather in a group of two", lambda: close(
                on_backend(lambda o, x: o.allgather(x, group="pair"), xs[r]), np.concatenate(members)))
    record(checks, "gradients through allreduce and allgather", lambda: _gradients(world))
    record(checks, "send and recv nodes, and their gradients", lambda: _send_recv(world))
    return checks


def _max_grad(xs: list[np.ndarray], r: int) -> tuple[bool, str]:
    top = np.max(xs, axis=0)
    grads = draws(4, (5,), len(xs))
    holders = sum((x == top).astype(float) for x in xs)
    expected = np.where(xs[r] == top, sum(grads) / holders, 0.0)
    got = on_backend(lambda o, grad, x, out: o.allreduce_grad(grad, x, out, reduction="max"), grads[r], xs[r], top)
    return close(got, expected, 1e-14)


def _gradients(world: dist.World) -> tuple[bool, str]:
    """L = sum over ranks of <c_r, allreduce(x_r)> + <d_r, allgather(x_r)>: dL/dx_r = sum c + (sum d)'s part r."""
    r, n = world.rank, world.size
    cs, ds, xs = draws(5, (4,), n), draws(6, (4 * n,), n), draws(7, (4,), n)
    x = g.parameter("x", xs[r])
    loss = g.reduce_sum(g.allreduce(x) * g.constant(cs[r])) + g.reduce_sum(g.allgather(x) * g.constant(ds[r]))
    (grad,) = g.gradients(loss, [x])
    value = g.Executor([grad], backends=BACKENDS).run()[0]
    return close(value, sum(cs) + np.split(sum(ds), n)[r], 1e-14)


def _send_recv(world: dist.World) -> tuple[bool, str]:
    """Rank 0 sends w0 * x to rank 1, which computes L = sum(w1 * received) and sends dL/d(received) back:
    rank 0's gradient of w0, w1 * x, comes back through the gradient of its send."""
    r = world.rank
    if r > 1 or world.size == 1:
        return True, "ranks 0 and 1 only"
    x, w0, w1 = draws(8, (3,), 3)
    if r == 0:
        weight = g.parameter("w0", w0)
        sent = dist.send(weight * g.constant(x), to=1)
        (grad,) = g.gradients(sent, [weight])  # the send, then the receipt of its gradient
        return close(g.Executor([grad], backends=BACKENDS).run()[0], w1 * x, 1e-15)
    like = g.placeholder("like", (3,), "float64")
    received = dist.recv(like, source=0)
    loss = g.reduce_sum(received * g.parameter("w1", w1))
    (grad_received,) = g.gradients(loss, [received])
    value = g.Executor([loss, dist.send(grad_received, to=0)], backends=BACKENDS).run(feed={like: np.zeros(3)})[0]
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
    if BACKEND == "nccl":  # one GPU per rank; torch.distributed's default: gloo for host tensors, NCCL for CUDA ones
        import cupy
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        cupy.cuda.Device(int(os.environ.get("LOCAL_RANK", "0"))).use()
    world = dist.init(backend="cpu:gloo,cuda:nccl" if BACKEND == "nccl" else None, timeout=timeout, failure_wait=2.0)
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
    # Nothing is left to do: leave without the interpreter's teardown, where gloo's worker threads can abort the
    # process ("terminate called without an active exception", exit -6: seen under CI's load after every figure)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
