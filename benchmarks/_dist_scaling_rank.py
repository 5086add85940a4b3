"""One rank of benchmarks/dist_scaling.py, which starts it under torchrun once per world size:

    torchrun --standalone --nproc-per-node W benchmarks/_dist_scaling_rank.py SETTINGS.json

Every rank runs the same measurements; rank 0 prints the progress and writes its results to the settings'
``out`` file after each measurement (a run stopped at its time limit keeps what it measured). A
measurement that would end after the settings' ``deadline`` is skipped, with a note, by every rank alike.

Timing: ``time.perf_counter`` around ``count`` back-to-back calls, with ``torch.cuda.synchronize()`` before
and after on a GPU and the ranks lined up by a small all-reduce first, divided by ``count``; medians of
several such measurements, after warm-up calls.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

# NVLink multicast stays off (a program that uses it can put a shared host's GPUs out of service):
# NCCL's NVLS, torch's symmetric-memory multicast and NVSHMEM's.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb and DataParallel's bucket_bytes


def multicast_overrides(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The variables of ``environ`` set to anything but their multicast-off value ("NAME=value")."""
    return [f"{k}={environ[k]}" for k, off in MULTICAST_OFF.items() if environ.get(k, off) != off]


@dataclass
class Settings:
    """What every rank measures; the driver writes it as JSON."""

    backend: str  # "nccl" (CuPy arrays, one GPU per rank) or "gloo" (host arrays)
    sizes: list[int]  # all-reduce message sizes, bytes
    weak_batch: int  # rows per rank, weak scaling
    strong_batch: int  # rows of the global batch, strong scaling
    ddp_model: str  # "resnet50" (torchvision, random init) or "tiny"
    warmup: int  # untimed steps (all-reduce calls) first
    steps: int  # timed steps per measurement
    repeats: int  # timed measurements per all-reduce size (each of ``count`` calls)
    deadline: float  # time.time() after which no measurement starts
    timeout: float  # seconds a collective may wait for a peer
    out: str  # rank 0's results (JSON)


@dataclass
class Results:
    world_size: int
    backend: str
    device: str
    allreduce: list[dict[str, Any]] = field(default_factory=list)
    executor: list[dict[str, Any]] = field(default_factory=list)
    ddp: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Rank:
    """This process's place in the run: its world, its clock, and the agreement of all ranks."""

    def __init__(self, settings: Settings) -> None:
        import torch
        from algoswap import dist

        self.settings, self.torch = settings, torch
        self.cuda = settings.backend == "nccl"
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if self.cuda:
            import cupy

            torch.cuda.set_device(local)  # one process per GPU
            cupy.cuda.Device(local).use()
        self.world = dist.init(backend=None if self.cuda else "gloo", timeout=settings.timeout)
        if self.cuda and "nccl" not in self.world.backend:
            raise RuntimeError(f"torch.distributed set up {self.world.backend!r}, not NCCL")
        self.device = torch.device("cuda", local) if self.cuda else torch.device("cpu")
        name = torch.cuda.get_device_name(local) if self.cuda else "cpu"
        self.results = Results(self.world.size, settings.backend, name)

    def say(self, text: str) -> None:
        if self.world.is_main:
            print(f"[W={self.world.size}] {text}", flush=True)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reduce_int(self, value: int, op: str) -> int:
        """``value`` reduced over the ranks (a CPU tensor: gloo in either setup)."""
        import torch.distributed as td

        tensor = self.torch.tensor([value], dtype=self.torch.int64)
        td.all_reduce(tensor, op=td.ReduceOp.MIN if op == "min" else td.ReduceOp.MAX)
        return int(tensor.item())

    def go(self, label: str, estimate: float) -> bool:
        """Whether every rank expects to finish ``label`` (``estimate`` seconds) before the deadline."""
        ok = self.reduce_int(int(time.time() + estimate < self.settings.deadline), "min") == 1
        if not ok:
            self.results.skipped.append(f"W={self.world.size}: {label} (time budget spent)")
            self.say(f"skipped {label}: the time budget is spent")
        return ok

    def timed(self, run: Callable[[], Any], count: int) -> float:
        """Seconds per call of ``count`` back-to-back calls (the ranks lined up first)."""
        self.sync()
        self.reduce_int(0, "max")
        started = time.perf_counter()
        for _ in range(count):
            run()
        self.sync()
        return (time.perf_counter() - started) / count

    def step_times(self, step: Callable[[], Any]) -> float:
        """The median of ``steps`` timed steps after ``warmup`` untimed ones."""
        for _ in range(self.settings.warmup):
            step()
        return statistics.median(self.timed(step, 1) for _ in range(self.settings.steps))

    def save(self) -> None:
        if self.world.is_main:
            Path(self.settings.out).write_text(json.dumps(asdict(self.results), indent=1))

    def section(self, name: str, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception as exc:  # recorded, and the next section runs (every rank fails alike or times out)
            self.results.errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:600]}")
            self.say(f"{name} failed: {type(exc).__name__}: {str(exc)[:300]}")
        self.save()

    # ------------------------------------------------------------------------------------------ buffers

    def zeros(self, count: int) -> Any:
        """A float32 array of zeros in the backend's memory (CuPy on the GPU, numpy on the host)."""
        if self.cuda:
            import cupy

            return cupy.zeros(count, cupy.float32)
        return np.zeros(count, np.float32)

    def view(self, array: Any) -> Any:
        """A torch tensor sharing ``array``'s memory."""
        return self.torch.from_dlpack(array) if self.cuda else self.torch.from_numpy(array)

    def our_allreduce(self, count: int) -> Callable[[Any], Any]:
        """The comm family's allreduce (sum) as the executor runs it: the backend's implementation, selected
        by the registry for float32 arrays of ``count`` elements in its memory, called through its Runner."""
        import algoswap
        from algoswap._runner import Runner
        from algoswap._select import select

        memory = "cuda" if self.cuda else "host"
        selection = select(algoswap.registry(), "allreduce", [(count,)], ["float32"], {"reduction": "sum"},
                           f"{self.settings.backend}:direct", memory)
        runner = Runner(selection)
        return lambda array: runner.run((array,))

    def comm_alone(self, parameter_bytes: int, ours: bool) -> float:
        """Seconds to all-reduce ``parameter_bytes`` of float32 gradients alone, in buckets of BUCKET_BYTES."""
        sizes = [BUCKET_BYTES] * (parameter_bytes // BUCKET_BYTES) + [parameter_bytes % BUCKET_BYTES]
        buffers = [self.zeros(max(1, size // 4)) for size in sizes if size]
        if ours:
            calls = [(self.our_allreduce(b.size), b) for b in buffers]
            run = lambda: [call(b) for call, b in calls]  # noqa: E731
        else:
            import torch.distributed as td

            tensors = [self.view(b) for b in buffers]
            run = lambda: [td.all_reduce(t) for t in tensors]  # noqa: E731
        run()
        return statistics.median(self.timed(run, 1) for _ in range(max(3, self.settings.steps)))


# ------------------------------------------------------------------------------------------- all-reduce


def allreduce_sweep(rank: Rank) -> None:
    """Each size: ours (the comm op, out of place) and torch.distributed.all_reduce (in place) on the same buffer,
    in turns; bus bandwidth = bytes / time * 2 (W - 1) / W."""
    import torch.distributed as td

    size_w, spent = rank.world.size, 0.0
    previous = 0
    for nbytes in rank.settings.sizes:
        estimate = spent * nbytes / previous if previous else 0.0
        if not rank.go(f"all-reduce of {_bytes(nbytes)}", estimate):
            break
        started = time.perf_counter()
        buffer = rank.zeros(nbytes // 4)
        tensor = rank.view(buffer)
        ours = rank.our_allreduce(buffer.size)
        check = float(ours(buffer + 1)[:8].sum())  # every rank adds ones: 8 W
        run_ours, run_torch = (lambda: ours(buffer)), (lambda: td.all_reduce(tensor))
        for _ in range(max(1, rank.settings.warmup)):
            run_ours(), run_torch()
        once = rank.timed(run_ours, 1)
        count = rank.reduce_int(min(50, max(1, math.ceil(0.01 / max(once, 1e-7)))), "max")  # about 10 ms each
        times: dict[str, list[float]] = {"ours": [], "torch": []}
        for _ in range(rank.settings.repeats):
            times["ours"].append(rank.timed(run_ours, count))
            times["torch"].append(rank.timed(run_torch, count))
        row: dict[str, Any] = {"bytes": nbytes, "calls": count, "correct": check == 8.0 * size_w}
        for name, values in times.items():
            seconds = statistics.median(values)
            row[f"{name}_s"] = seconds
            row[f"{name}_busbw_gbs"] = nbytes / seconds * 2 * (size_w - 1) / size_w / 1e9
        row["ours_over_torch"] = row["torch_s"] / row["ours_s"]  # bandwidth ratio: 1 = as fast as torch
        rank.results.allreduce.append(row)
        rank.save()
        rank.say(f"all-reduce {_bytes(nbytes):>8}: ours {row['ours_s'] * 1e3:8.3f} ms, torch {row['torch_s'] * 1e3:8.3f} ms, "
                 f"busbw {row['ours_busbw_gbs']:7.2f} / {row['torch_busbw_gbs']:7.2f} GB/s, ratio {row['ours_over_torch']:.3f}")
        del buffer, tensor
        spent, previous = time.perf_counter() - started, nbytes


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------------------------- training


def configurations(rank: Rank) -> list[tuple[str, int]]:
    """(scaling, rows per rank): weak at weak_batch per rank, strong at strong_batch / W per rank."""
    size, settings = rank.world.size, rank.settings
    found = [("weak", settings.weak_batch)]
    if settings.strong_batch % size:
        rank.results.notes.append(f"strong scaling: a global batch of {settings.strong_batch} does not split into {size} ranks")
    else:
        found.append(("strong", settings.strong_batch // size))
    return found


def scaling_section(rank: Rank, name: str, measure: Callable[[int], dict[str, Any]]) -> None:
    """``measure(rows per rank)`` for each configuration (one measurement per distinct batch)."""
    rows_out: list[dict[str, Any]] = getattr(rank.results, name)
    done: dict[int, dict[str, Any]] = {}
    seconds_per_row = 0.0  # of the last measurement, set-up included: the next one's estimate
    for scaling, per_rank in configurations(rank):
        if per_rank not in done:
            if not rank.go(f"{name} at {per_rank} rows per rank ({scaling})", seconds_per_row * per_rank):
                continue
            started = time.perf_counter()
            done[per_rank] = measure(per_rank)
            seconds_per_row = (time.perf_counter() - started) / per_rank
        row = {"scaling": scaling, "per_rank": per_rank, "global_batch": per_rank * rank.world.size, **done[per_rank]}
        rows_out.append(row)
        rank.save()
        rank.say(f"{name} {scaling:6} {per_rank:4} rows/rank: step {row['step_s'] * 1e3:8.2f} ms, without communication "
                 f"{row['local_s'] * 1e3:8.2f} ms, all-reduces alone {row['comm_s'] * 1e3:7.2f} ms")


def executor_step(rank: Rank, per_rank: int, parallel: bool) -> tuple[Callable[[], Any], int]:
    """One training step of a small CNN (conv-relu-pool twice, linear: examples/train_digits.py's shape) with
    the executor, and its parameters' bytes: DataParallel over the ranks, or alone on ``per_rank`` rows."""
    from algoswap import dist, graph as g

    shape, widths = ((3, 32, 32), (64, 128)) if rank.cuda else ((1, 8, 8), (4, 8))
    size = rank.world.size if parallel else 1
    rng = np.random.default_rng(0)
    rows = 2 * per_rank * size
    images, labels = rng.standard_normal((rows, *shape)).astype(np.float32), rng.integers(0, 10, rows)
    loader = dist.ShardedLoader if parallel else g.DataLoader
    x, y = g.dataloader_op({"train": loader(images, labels, batch_size=per_rank * size, seed=0)})
    flat = widths[1] * (shape[1] // 4) * (shape[2] // 4)
    weights = {"w1": (widths[0], shape[0], 3, 3), "b1": (widths[0],), "w2": (widths[1], widths[0], 3, 3),
               "b2": (widths[1],), "fc": (10, flat), "fcb": (10,)}
    p = {k: g.parameter(k, (rng.standard_normal(s) * 0.05).astype(np.float32)) for k, s in weights.items()}
    h = g.maxpool2d(g.relu(g.conv2d(x, p["w1"], p["b1"], padding=1)), kernel_size=2)
    h = g.maxpool2d(g.relu(g.conv2d(h, p["w2"], p["b2"], padding=1)), kernel_size=2)
    loss = g.softmax_cross_entropy(g.linear(g.flatten(h), p["fc"], p["fcb"]), y)
    optimizer = g.Momentum(lr=0.01)
    train = (dist.DataParallel(optimizer) if parallel else optimizer).minimize(loss)
    backends = ["cuda", "nccl"] if rank.cuda else ["numpy", "gloo"]
    executor = g.Executor({"train": [loss, train]}, backends=backends)
    return (lambda: executor.run("train")), sum(int(np.prod(s)) * 4 for s in weights.values())


def measure_executor(rank: Rank, per_rank: int) -> dict[str, Any]:
    step, nbytes = executor_step(rank, per_rank, parallel=True)
    local, _ = executor_step(rank, per_rank, parallel=False)
    return {"step_s": rank.step_times(step), "local_s": rank.step_times(local), "comm_s": rank.comm_alone(nbytes, ours=True),
            "parameter_bytes": nbytes}


def ddp_model(rank: Rank) -> Any:
    """ResNet-50 (torchvision, random init) with every convolution swapped to cuda:guess, or a tiny CNN
    swapped to numpy:smm on the host."""
    import algoswap
    from torch import nn

    rank.torch.manual_seed(0)
    if rank.settings.ddp_model == "resnet50":
        import torchvision

        return algoswap.swap_conv2d(torchvision.models.resnet50(weights=None).to(rank.device), "cuda:guess")
    tiny = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).to(rank.device)
    return algoswap.swap_conv2d(tiny, "numpy:smm")


def ddp_section(rank: Rank) -> None:
    import algoswap
    from torch import nn

    torch = rank.torch
    model = ddp_model(rank)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank.device.index] if rank.cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    pixels = 224 if rank.settings.ddp_model == "resnet50" else 8
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def measure(per_rank: int) -> dict[str, Any]:
        x = torch.randn(per_rank, 3, pixels, pixels, device=rank.device)
        y = torch.randint(0, 10, (per_rank,), device=rank.device)

        def step(communicate: bool = True) -> None:
            with contextlib.nullcontext() if communicate else ddp.no_sync():
                loss = nn.functional.cross_entropy(ddp(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            optimizer.step()

        return {"step_s": rank.step_times(step), "local_s": rank.step_times(lambda: step(False)),
                "comm_s": rank.comm_alone(nbytes, ours=False), "parameter_bytes": nbytes}

    scaling_section(rank, "ddp", measure)
    used = sorted({row.implementation for row in algoswap.explain(model)})
    rank.results.notes.append(f"ddp: {rank.settings.ddp_model}, float32, convolutions swapped to {', '.join(used)}")


def main() -> None:
    settings = Settings(**json.loads(Path(sys.argv[1]).read_text()))
    overrides = multicast_overrides(os.environ)
    if overrides:
        raise SystemExit(f"refusing to run: NVLink multicast must stay off ({', '.join(overrides)})")
    started_with = ", ".join(f"{k}={os.environ.get(k, 'unset')}" for k in MULTICAST_OFF)
    os.environ.update(MULTICAST_OFF)
    rank = Rank(settings)
    rank.results.notes.append(f"NVLink multicast off: the ranks were started with {started_with}")
    rank.results.notes.append(f"torch {rank.torch.__version__}; TF32 for convolutions "
                              f"{rank.torch.backends.cudnn.allow_tf32}, for matrix products {rank.torch.backends.cuda.matmul.allow_tf32}")
    rank.say(f"{settings.backend} on {rank.results.device}, {rank.world.size} rank(s)")
    rank.section("all-reduce", lambda: allreduce_sweep(rank))
    rank.section("executor", lambda: scaling_section(rank, "executor", lambda rows: measure_executor(rank, rows)))
    rank.section("ddp", lambda: ddp_section(rank))
    from algoswap import dist

    dist.shutdown()
    # Nothing is left to do: leave without the interpreter's teardown, where gloo's worker threads can abort the
    # process ("terminate called without an active exception", exit -6: seen under CI's load after every figure)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
