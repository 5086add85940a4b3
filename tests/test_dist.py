"""Training across processes (issue 19): the comm op family, algoswap.dist and the algoswap-dist plugin.

The launches run tests/dist_worker.py under ``torchrun --standalone`` with 2 and 4 processes on the loopback
interface (GLOO_SOCKET_IFNAME=lo, OMP_NUM_THREADS=1), each rank running many checks; every launch has a
bounded time and every collective a timeout, so nothing hangs. The rest runs in this process, in a world of one.

``ALGOSWAP_DIST_TEST_BACKEND=nccl`` runs the launches' collectives, data-parallel equivalence, sparse embeddings
and restart on GPUs with the nccl backend, one process per GPU, at 2, 4 and 8 ranks (each skipped where fewer
GPUs are); the torch-model checks and the dead-peer test stay gloo's (the default). NVLink multicast is off in
every launched process (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
import algoswap._groups
from algoswap._groups import Group

ROOT = Path(__file__).resolve().parent
WORKER = ROOT / "dist_worker.py"
LAUNCH_SECONDS = 240  # a launch still running then is killed and fails
BACKEND = os.environ.get("ALGOSWAP_DIST_TEST_BACKEND", "gloo")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ENV = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "ALGOSWAP_DIST_TEST_BACKEND": BACKEND, **MULTICAST_OFF}


def _launchable(ranks: int) -> str:
    """Why ``ranks`` processes cannot be launched here ("" if they can): on nccl, one GPU each."""
    try:
        import torch.distributed as torch_dist
    except ImportError:
        return "torch is not installed"
    if not torch_dist.is_available() or not torch_dist.is_gloo_available():
        return "this torch has no gloo"
    if "gloo" not in algoswap.registry().backends:
        return "algoswap-dist is not installed (pip install -e plugins/dist_backend)"
    if BACKEND not in ("gloo", "nccl"):
        return f"ALGOSWAP_DIST_TEST_BACKEND={BACKEND!r}: gloo or nccl"
    if BACKEND == "nccl":
        import torch

        available = algoswap.registry().backends["nccl"].availability()
        if available is not True:
            return f"nccl unavailable: {available}"
        if torch.cuda.device_count() < ranks:
            return f"nccl: {ranks} ranks need {ranks} GPUs (one each); {torch.cuda.device_count()} here"
    return ""


def needs(ranks: int, only: str | None = None) -> pytest.MarkDecorator:
    """Skipped unless ``ranks`` processes can be launched here, and, given ``only``, unless its backend is tested."""
    reason = f"{only} only (ALGOSWAP_DIST_TEST_BACKEND={only})" if only and only != BACKEND else _launchable(ranks)
    return pytest.mark.skipif(bool(reason), reason=reason or "launchable")


def _run(commands: list[list[str]], envs: list[dict[str, str]]) -> subprocess.CompletedProcess[str]:
    """Start the commands (each in a process group of its own), wait for the first within LAUNCH_SECONDS, then
    end every group still running: nothing outlives the test."""
    processes = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True) for c, e in zip(commands, envs)]
    try:
        output, _ = processes[0].communicate(timeout=LAUNCH_SECONDS)
    except subprocess.TimeoutExpired:
        output = f"still running after {LAUNCH_SECONDS} s: killed"
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(commands[0], processes[0].returncode, output, "")


def torchrun(ranks: int, scenario: str, out: Path, *options: str, timeout: int = 60) -> list[dict[str, Any]]:
    """Every rank's report of ``scenario`` run under torchrun."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *options,
               str(WORKER), scenario, str(out)]
    result = _run([command], [{**os.environ, **ENV, "ALGOSWAP_TEST_DIST_TIMEOUT": str(timeout)}])
    reports = sorted(out.glob(f"{scenario}_rank*.json"))
    assert result.returncode == 0 and len(reports) == ranks, result.stdout[-6000:]
    return [json.loads(path.read_text()) for path in reports]


def assert_checks(reports: list[dict[str, Any]], expected: int) -> None:
    """Every check passed on every rank, and rank 0 ran at least ``expected`` of them."""
    failed = [f"rank {r}: {name}: {detail}" for r, report in enumerate(reports) for name, ok, detail in report["checks"] if not ok]
    assert not failed, "\n".join(failed)
    assert len(reports[0]["checks"]) >= expected, [name for name, _, _ in reports[0]["checks"]]


@needs(2)
def test_two_ranks(tmp_path: Path) -> None:
    """Collectives against NumPy; data-parallel training = single-process (SGD, Momentum, Adam; replicated and
    row-sharded embeddings; float64 to 1e-12, float32 to 1e-6); gradient reductions overlapping the backward
    pass; checkpoints; rank-0 logs; swapped torch models under DDP, FSDP and pipelining (gloo's run only);
    executor programs as pipeline stages."""
    if BACKEND == "gloo":
        assert_checks(torchrun(2, "collectives+training+torch", tmp_path), expected=38)
    else:
        assert_checks(torchrun(2, "collectives+training", tmp_path), expected=32)


@needs(4)
def test_four_ranks(tmp_path: Path) -> None:
    assert_checks(torchrun(4, "collectives+training", tmp_path), expected=32)


@needs(8, only="nccl")
def test_eight_ranks(tmp_path: Path) -> None:
    assert_checks(torchrun(8, "collectives+training", tmp_path), expected=32)


@needs(2)
def test_crash_restart_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Rank 1 dies after step 3 of the first attempt; torchrun restarts both ranks (a store key prefix per
    attempt), which resume from the checkpoint of step 2 and end where single-process training ends."""
    reports = torchrun(2, "restart", tmp_path, "--max-restarts=1")
    assert [report["attempt"] for report in reports] == [1, 1]
    assert_checks(reports, expected=3)


@needs(3, only="gloo")
def test_a_dead_and_a_stuck_peer_are_named(tmp_path: Path) -> None:
    """Three ranks started as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 hosts the
    store): rank 1 exits and rank 2 sleeps before the second allreduce of a group with a 5 s timeout. Rank 0's
    allreduce fails within it, and the error names the graph node and both ranks (a roll call of 2 s)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {**os.environ, **ENV, "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    commands = [[sys.executable, str(WORKER), "failing", str(tmp_path)] for _ in range(3)]
    envs = [{**base, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(3)]
    result = _run(commands, envs)
    error = json.loads((tmp_path / "failing_error.json").read_text()) if (tmp_path / "failing_error.json").exists() else None
    assert error is not None, result.stdout[-6000:]
    message = error["message"]
    assert "node 'total_loss'" in message and "PeerError" in message, message
    assert "rank 1 (host" in message and "rank 2 (host" in message and "group 'quick'" in message, message
    assert error["seconds"] < LAUNCH_SECONDS, error


# ------------------------------------------------------------------------------- in this process: a world of one


def _python(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    result = subprocess.run([sys.executable, "-c", code], env={**environment, **env}, capture_output=True, text=True,
                            timeout=LAUNCH_SECONDS)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_alone_a_process_is_a_world_of_one_and_imports_no_torch() -> None:
    code = ("import sys, numpy as np, algoswap\nfrom algoswap import dist\n"
            "print(algoswap.ops.allreduce(np.arange(3.0), reduction='mean').tolist(), dist.world().size, 'torch' in sys.modules)")
    assert _python(code) == "[0.0, 1.0, 2.0] 1 False"


def test_a_default_group_the_program_set_up_is_adopted() -> None:
    code = ("import numpy as np, torch.distributed as td, algoswap\nfrom algoswap import dist\n"
            "td.init_process_group('gloo', store=td.HashStore(), rank=0, world_size=1)\n"
            "here = dist.init()\nx = np.arange(3.0)\n"
            "print(here.size, here.backend, algoswap.select('allreduce', [x.shape], 'float64').impl.qualified)")
    assert _python(code) == "1 gloo gloo:direct"


def test_launched_by_torchrun_without_init_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(algoswap._groups, "_GROUPS", {})  # no group set up (the conformance kit may have made a world of one)
    with pytest.raises(algoswap.OpArgumentError, match=r"algoswap.dist.init\(\) first: WORLD_SIZE=2"):
        algoswap.ops.allreduce(np.ones(3))


@pytest.fixture
def four_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process pretends to be rank 2 of a group "four" of four ranks (shapes only: nothing communicates)."""
    monkeypatch.setitem(algoswap._groups._GROUPS, "four", Group("four", (0, 1, 2, 3), 2))


@pytest.mark.parametrize("op, shape, attrs, expected", [
    ("allgather", (2, 3), {"axis": 1}, (2, 12)), ("reduce_scatter", (8, 3), {}, (2, 3)), ("all_to_all", (4, 2), {}, (4, 2)),
    ("allreduce", (), {"reduction": "max"}, ()), ("shard_indices", (5,), {"rows": 3, "shards": 4}, (4, 5)),
])
def test_shape_rules_know_the_group_size(four_ranks: None, op: str, shape: tuple[int, ...], attrs: dict[str, Any],
                                         expected: tuple[int, ...]) -> None:
    group = {} if op == "shard_indices" else {"group": "four"}
    dtype = "int64" if op == "shard_indices" else "float64"
    assert algoswap.registry().spec(op).bind([shape], [dtype], {**attrs, **group}).out_shape == expected


@pytest.mark.parametrize("op, shape, attrs, message", [
    ("reduce_scatter", (6, 3), {}, "divisible by the group's 4 ranks"),
    ("all_to_all", (3,), {}, "divisible by the group's 4 ranks"),
    ("broadcast", (3,), {"root": 4}, r"a rank of the group, in \[0, 3\]"),
    ("sendrecv", (3,), {"send_to": 7}, r"a rank of the group, in \[0, 3\], or None"),
    ("allgather", (3,), {"axis": 1}, "an axis of the 1-D input"),
])
def test_shape_rules_refuse_what_cannot_be_split(four_ranks: None, op: str, shape: tuple[int, ...],
                                                 attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(algoswap.OpArgumentError, match=message):
        algoswap.registry().spec(op).bind([shape], ["float64"], {**attrs, "group": "four"})


def test_an_unknown_group_is_named() -> None:
    with pytest.raises(algoswap.OpArgumentError, match=r"argument 'group' got 'dp'; expected a group set up by algoswap.dist.new_group\(\) \(known: world\)"):
        algoswap.ops.allreduce(np.ones(3), group="dp")


def test_gradient_rules_pair_the_collectives() -> None:
    registry = algoswap.registry()
    rules = {op: registry.spec(op).gradients[0].op for op in ("allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")}
    assert rules == {"allreduce": "allreduce_grad", "allgather": "reduce_scatter", "reduce_scatter": "allgather",
                     "broadcast": "broadcast_grad", "all_to_all": "all_to_all", "sendrecv": "sendrecv"}
    call = registry.spec("sendrecv").bind([(3,)], ["float64"], {"send_to": 0})
    assert registry.spec("sendrecv").gradients[0].attrs_for(call) == {"send_to": None, "recv_from": 0, "group": "world", "size": 1}


def _net(parallel: bool, bucket_bytes: int = 64) -> tuple[g.Executor, list[g.Node]]:
    rng = np.random.default_rng(0)
    x = g.placeholder("x", (6, 4), "float64")
    params = [g.parameter(n, rng.standard_normal(s)) for n, s in (("w1", (5, 4)), ("b1", (5,)), ("w2", (2, 5)), ("b2", (2,)))]
    out = g.linear(g.relu(g.linear(x, params[0], params[1])), params[2], params[3])
    loss = g.reduce_mean(out * out)
    optimizer = algoswap.dist.DataParallel(g.Adam(lr=0.1), bucket_bytes=bucket_bytes) if parallel else g.Adam(lr=0.1)
    return g.Executor({"train": [loss, optimizer.minimize(loss)]}), params


def test_data_parallel_in_a_world_of_one_is_plain_training() -> None:
    feed = {"x": np.random.default_rng(1).standard_normal((6, 4))}
    results = []
    for parallel in (False, True):
        executor, params = _net(parallel)
        losses = [float(executor.run("train", feed)[0]) for _ in range(3)]
        results.append((losses, [p.value.copy() for p in params]))
    assert results[0][0] == results[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(results[0][1], results[1][1]))


def test_gradient_buckets_start_during_the_backward_pass_and_are_waited_for_at_its_end() -> None:
    executor, _ = _net(parallel=True, bucket_bytes=64)  # w2 and b2 (96 bytes): two buckets; w1 and b1: two more
    ops = [step.op for step in executor.plan("train").steps]
    starts = [i for i, op in enumerate(ops) if op == "allreduce_start"]
    gradients = [i for i, op in enumerate(ops) if op.endswith(("_grad", "_grad_weight", "_grad_input", "_grad_bias"))]
    waits = [i for i, op in enumerate(ops) if op == "comm_wait"]
    assert len(starts) == 4 and starts[0] < gradients[-1] < min(waits), ops


def test_a_node_setup_runs_once_per_executor() -> None:
    calls: list[str] = []
    x = g.placeholder("x", (2,), "float64")
    out = g.relu(x)
    out.setup = lambda: calls.append("setup")
    executor = g.Executor({"a": [out], "b": [out]})
    for name in ("a", "b", "a"):
        executor.run(name, {x: np.ones(2)})
    g.Executor([out]).run(feed={x: np.ones(2)})
    assert calls == ["setup", "setup"]


def test_state_dict_resumes_training_exactly() -> None:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((12, 3)), rng.integers(0, 2, 12)
    x, y = g.dataloader_op({"train": g.DataLoader(*data, batch_size=4, seed=3)})
    w = g.parameter("w", rng.standard_normal((2, 3)))
    loss = g.softmax_cross_entropy(g.linear(x, w), y)
    executor = g.Executor({"train": [loss, g.Adam(lr=0.1).minimize(loss)]})
    for _ in range(2):
        executor.run("train")
    state = executor.state_dict()
    assert sorted(state) == ["loaders", "parameters", "steps", "variables"] and state["steps"] == {"update_w": 2}
    first = [float(executor.run("train")[0]) for _ in range(4)], w.value.copy()
    executor.load_state_dict(state)
    second = [float(executor.run("train")[0]) for _ in range(4)], w.value.copy()
    assert first[0] == second[0] and np.array_equal(first[1], second[1])
    with pytest.raises(g.GraphError, match="parameters in the state but not in the graph: v"):
        executor.load_state_dict({**state, "parameters": {**state["parameters"], "v": np.ones(2)}})


def test_sharded_loader_gives_each_rank_its_share(four_ranks: None) -> None:
    rows = np.arange(16)
    whole = g.DataLoader(rows, batch_size=8, seed=5)
    share = algoswap.dist.ShardedLoader(rows, batch_size=8, seed=5, group="four")
    for _ in range(4):  # two epochs
        assert np.array_equal(share.next_batch()[0], whole.next_batch()[0][4:6])
    with pytest.raises(g.GraphError, match="multiple of the 4 ranks"):
        algoswap.dist.ShardedLoader(rows, batch_size=6, group="four")


def test_a_comm_node_nothing_serves_in_device_memory_runs_on_the_host() -> None:
    from boxed_backend import register_boxed

    register_boxed([("relu", "direct")])
    try:
        x = g.placeholder("x", (3,), "float64")
        total = g.allreduce(g.relu(x, algorithm="boxed:direct"), name="total")
        executor = g.Executor([total])
        assert np.array_equal(executor.run(feed={x: np.array([-1.0, 0.5, 2.0])})[0], [0.0, 0.5, 2.0])
        program = executor.plan()
        assert [s.note for s in program.transfers] == ["host -> boxed", "boxed -> host"], str(executor.explain())
        assert [s.memory.name for s in program.steps if s.name == "total"] == ["host"]
    finally:
        algoswap.reload_plugins()


def test_an_executor_program_as_a_torch_module_gives_the_graph_gradients() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = g.placeholder("x", (3, 4), "float64")
    w, b = g.parameter("layer.w", rng.standard_normal((2, 4))), g.parameter("layer.b", rng.standard_normal(2))
    module = algoswap.dist.ProgramModule([x], g.tanh(g.linear(x, w, b)))
    data = torch.from_numpy(rng.standard_normal((3, 4))).requires_grad_()
    module(data).square().sum().backward()
    reference = torch.tanh(data.detach().requires_grad_() @ torch.from_numpy(w.value).T + torch.from_numpy(b.value))
    weights = [torch.from_numpy(w.value.copy()).requires_grad_(), torch.from_numpy(b.value.copy()).requires_grad_()]
    inputs = data.detach().clone().requires_grad_()
    torch.tanh(inputs @ weights[0].T + weights[1]).square().sum().backward()
    assert reference.shape == (3, 2) and [n for n, _ in module.named_parameters()] == ["layer_w", "layer_b"]
    for got, expected in [(module.layer_w.grad, weights[0].grad), (module.layer_b.grad, weights[1].grad), (data.grad, inputs.grad)]:
        assert torch.allclose(got, expected, rtol=1e-13, atol=0)


# ------------------------------------------------------------------------------------- on a GPU (the H200)


def _no_nccl() -> str:
    """Why NCCL on CuPy memory cannot be tried here ("" if it can)."""
    backends = algoswap.registry().backends
    for name in ("cuda", "nccl"):
        if name not in backends:
            return f"the {name} backend is not installed"
        available = backends[name].availability()
        if available is not True:
            return f"{name} unavailable: {available}"
    return ""


@pytest.mark.skipif(bool(_no_nccl()), reason=_no_nccl() or "nccl")
def test_nccl_reduces_cupy_memory_in_place_at_world_size_one() -> None:
    """A world of one on the GPU: comm nodes fed CuPy arrays run on nccl, with no transfer of their inputs
    (only the outputs come home); a data-parallel step runs every op on the GPU and matches NumPy's."""
    code = '''
import numpy as np, cupy
from algoswap import dist, graph as g
print(dist.init().backend)
x = g.placeholder("x", (4, 6), "float32")
total, gathered = g.allreduce(x, name="total"), g.allgather(x, axis=1, name="gathered")
executor = g.Executor([total, gathered])
out = executor.run(feed={x: cupy.arange(24, dtype=cupy.float32).reshape(4, 6)})
steps = executor.last.steps
print(sorted({s.backend for s in steps if s.op in ("allreduce", "allgather")}), sorted(s.name for s in executor.last.transfers))
print(bool(np.array_equal(out[0], np.arange(24).reshape(4, 6))), out[1].shape)
def step(backends, data):
    rng = np.random.default_rng(0)
    w = g.parameter("w", rng.standard_normal((3, 6)).astype(np.float32))
    labels = g.placeholder("labels", (4,), "int64")
    loss = g.softmax_cross_entropy(g.linear(x, w), labels)
    ex = g.Executor([loss, dist.DataParallel(g.Momentum(0.1)).minimize(loss)], backends=backends)
    losses = [float(ex.run(feed={x: data, labels: np.arange(4) % 3})[0]) for _ in range(3)]
    return losses, ex
data = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
gpu, ex = step(["cuda", "nccl"], cupy.asarray(data))
host, _ = step(["numpy"], data)
print(sorted({s.backend for s in ex.last.steps if s.kind == "op"}), max(abs(a - b) for a, b in zip(gpu, host)) < 1e-5)
'''
    lines = _python(code).splitlines()
    assert lines[0] == "cpu:gloo,cuda:nccl", lines
    assert lines[1] == "['nccl'] ['gathered->host', 'total->host']", lines
    assert lines[2] == "True (4, 6)", lines  # a world of one gathers its own block only
    assert lines[3] == "['cuda', 'nccl'] True", lines
