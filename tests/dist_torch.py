"""PyTorch models with swapped layers under DDP, FSDP and torch.distributed.pipelining, and executor programs as
pipeline stages (``dist.ProgramModule``), for tests/test_dist.py (run on every rank by dist_worker.py). Each is
compared in float64 with single-process training on the global batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

import algoswap
from algoswap import dist, graph as g
from dist_worker import Checks, close, record

GLOBAL_BATCH = 8


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).double()


def _swapped() -> nn.Module:
    return algoswap.swap_operation("linear", algoswap.swap_conv2d(_model(), "smm"), "numpy:gemm")


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(GLOBAL_BATCH, 1, 6, 6, generator=generator, dtype=torch.float64),
            torch.randint(0, 3, (GLOBAL_BATCH,), generator=generator))


def _train(model: nn.Module, share: slice, steps: int = 3) -> list[float]:
    x, y = _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x[share]), y[share])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def _share(world: dist.World) -> slice:
    size = GLOBAL_BATCH // world.size
    return slice(world.rank * size, (world.rank + 1) * size)


def _against_single(state: dict[str, Any]) -> tuple[bool, str]:
    reference = _model()
    _train(reference, slice(None))
    results = [close(np.asarray(state[k]), v.detach().numpy(), 1e-12) for k, v in reference.state_dict().items()]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def swapped_models(world: dist.World) -> Checks:
    checks: Checks = []
    record(checks, "swapped model under DistributedDataParallel = single process", lambda: _ddp(world))
    record(checks, "swapped model under FSDP (fully_shard) = single process", lambda: _fsdp(world))
    if world.size == 2:
        for schedule in ("ScheduleGPipe", "Schedule1F1B"):
            record(checks, f"swapped stages under pipelining ({schedule}): gradients = the whole batch's",
                   lambda: _pipeline(world, schedule, swapped=True))
            record(checks, f"executor programs as stages (dist.ProgramModule, {schedule}): gradients = the whole batch's",
                   lambda: _pipeline(world, schedule, swapped=False))
    return checks


def _ddp(world: dist.World) -> tuple[bool, str]:
    model = _swapped()
    _train(nn.parallel.DistributedDataParallel(model), _share(world))
    return _against_single({k: v.detach().numpy() for k, v in model.state_dict().items()})


def _fsdp(world: dist.World) -> tuple[bool, str]:
    from torch.distributed.fsdp import fully_shard

    model = _swapped()
    fully_shard(model)
    _train(model, _share(world))
    return _against_single({k: v.full_tensor().numpy() for k, v in model.state_dict().items()})


# ----------------------------------------------------------------------------------- pipelines of two stages

def _layers() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((8, 6)) * 0.5, np.zeros(8), rng.standard_normal((3, 8)) * 0.5, np.zeros(3)]


def _torch_stage(rank: int) -> nn.Module:
    weights = _layers()
    layer = (nn.Linear(6, 8) if rank == 0 else nn.Linear(8, 3)).double()
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(weights[2 * rank]))
        layer.bias.copy_(torch.from_numpy(weights[2 * rank + 1]))
    stage = nn.Sequential(layer, nn.ReLU()) if rank == 0 else nn.Sequential(layer)
    return algoswap.swap_operation("linear", stage, "numpy:gemm")


def _program_stage(rank: int, micro: int) -> nn.Module:
    weights = _layers()
    x = g.placeholder("x", (micro, 6 if rank == 0 else 8), "float64")
    w, b = g.parameter(f"w{rank}", weights[2 * rank]), g.parameter(f"b{rank}", weights[2 * rank + 1])
    out = g.linear(x, w, b)
    return dist.ProgramModule([x], g.relu(out) if rank == 0 else out)


def _whole_batch_gradients(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """The gradients of the mean cross-entropy of the whole batch, by the executor in one process."""
    params = [g.parameter(f"p{i}", w) for i, w in enumerate(_layers())]
    logits = g.linear(g.relu(g.linear(g.constant(x), params[0], params[1])), params[2], params[3])
    loss = g.softmax_cross_entropy(logits, g.constant(y))
    return [np.asarray(v) for v in g.Executor(g.gradients(loss, params)).run()]


def _pipeline(world: dist.World, schedule: str, swapped: bool) -> tuple[bool, str]:
    from torch.distributed import pipelining

    micro, batches = 2, 4
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((micro * batches, 6)), rng.integers(0, 3, micro * batches)
    module = _torch_stage(world.rank) if swapped else _program_stage(world.rank, micro)
    example = torch.zeros(micro, 6 if world.rank == 0 else 8, dtype=torch.float64)
    stage = pipelining.PipelineStage(module, world.rank, 2, torch.device("cpu"), input_args=(example,))
    loss = lambda out, target: nn.functional.cross_entropy(out, target)  # noqa: E731
    runner = getattr(pipelining, schedule)(stage, n_microbatches=batches, loss_fn=loss, scale_grads=True)
    if world.rank == 0:
        runner.step(torch.from_numpy(x))
    else:
        runner.step(target=torch.from_numpy(y))
    expected = _whole_batch_gradients(x, y)[2 * world.rank:2 * world.rank + 2]
    results = [close(p.grad.numpy(), e, 1e-12) for p, e in zip(module.parameters(), expected)]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)
