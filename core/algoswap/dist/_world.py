"""Setting up torch.distributed for algoswap: the world of processes torchrun started, and named groups.

``init()`` reads torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK,
TORCHELASTIC_RESTART_COUNT). Under ``torchrun --max-restarts`` the store torchrun's agent hosts outlives a
restart and keeps the previous attempt's keys, so a new attempt could meet stale ones (pytorch/pytorch#135712):
each attempt works under its own key prefix, ``algoswap/attempt_<TORCHELASTIC_RESTART_COUNT>``. The store is
the environment's (a ``tcp://`` init method hangs under torchrun, which sets TORCHELASTIC_USE_AGENT_STORE).
"""

from __future__ import annotations

import atexit
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Sequence

from .._errors import AlgoswapError
from .._groups import WORLD, Group, add_group, clear_groups, find_group

PREFIX = "algoswap/attempt_{attempt}"


class DistError(AlgoswapError, RuntimeError):
    """Setting up or using the group of processes failed; the message says what and where."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks: ``rank`` of ``size``, ``local_rank`` on its machine,
    ``attempt`` (torchrun's restart count), the torch.distributed ``backend``, this ``host``."""

    rank: int
    size: int
    local_rank: int = 0
    attempt: int = 0
    backend: str = "none"
    host: str = ""

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that logs, shows progress and writes checkpoints."""
        return self.rank == 0


@dataclass
class _State:
    world: World
    store: Any  # the torch Store under this attempt's prefix
    timeout: float
    failure_wait: float
    ours: bool  # whether init() created torch's default group (then shutdown() destroys it)


_STATE: _State | None = None


def init(backend: str | None = None, timeout: float = 300.0, *, failure_wait: float = 5.0) -> World:
    """Join the ranks torchrun started (or, run without torchrun, a world of this process alone) and return
    this process's ``World``. Idempotent; adopts a default group the program set up itself.

    ``backend``: torch.distributed's ("gloo"; default: "cpu:gloo,cuda:nccl" where CUDA and NCCL are, else
    "gloo"). ``timeout``: seconds any collective (and joining) may wait for a peer before it fails, with an
    error naming the ranks that did not answer within a further ``failure_wait`` seconds (never a hang)."""
    global _STATE
    if _STATE is not None:
        _declare_world(_STATE.world)
        return _STATE.world
    import torch.distributed as dist

    if not dist.is_available():
        raise DistError("this torch build has no torch.distributed")
    if dist.is_initialized():
        _STATE = _adopt(dist, timeout, failure_wait)
    else:
        _STATE = _join(dist, backend, timeout, failure_wait)
    world = _STATE.world
    _declare_world(world)
    _STATE.store.set(f"host/{world.rank}", f"host {world.host}, pid {os.getpid()}")
    return world


def _declare_world(world: World) -> None:
    if find_group(WORLD) is None:
        add_group(Group(WORLD, tuple(range(world.size)), world.rank))


def _join(dist: Any, backend: str | None, timeout: float, failure_wait: float) -> _State:
    env = os.environ
    attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or "0")
    if "WORLD_SIZE" in env:
        rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
        store = _tcp_store(dist, rank, size, timeout)
    else:
        rank, size, store = 0, 1, dist.HashStore()
    prefixed = dist.PrefixStore(PREFIX.format(attempt=attempt), store)
    chosen = backend or _default_backend(dist)
    try:
        dist.init_process_group(chosen, store=prefixed, rank=rank, world_size=size, timeout=timedelta(seconds=timeout))
    except Exception as exc:
        raise DistError(f"rank {rank} of {size} could not join ({chosen}, within {timeout:g} s): {exc}") from exc
    world = World(rank, size, int(env.get("LOCAL_RANK", "0") or "0"), attempt, chosen, socket.gethostname())
    atexit.register(shutdown)  # torch's group torn down before the interpreter is, not by its static destructors
    return _State(world, prefixed, timeout, failure_wait, ours=True)


def _tcp_store(dist: Any, rank: int, size: int, timeout: float) -> Any:
    """The environment's store: torchrun's agent hosts it (TORCHELASTIC_USE_AGENT_STORE), else rank 0 does."""
    env = os.environ
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in env]
    if missing:
        raise DistError(f"WORLD_SIZE is set but not {', '.join(missing)}: launch with torchrun (or set them all)")
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        return dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), size, is_master=not agent and rank == 0,
                             timeout=timedelta(seconds=timeout), multi_tenant=True)
    except Exception as exc:
        raise DistError(f"rank {rank} could not reach the store at {env['MASTER_ADDR']}:{env['MASTER_PORT']}: {exc}") from exc


def _default_backend(dist: Any) -> str:
    import torch

    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def _adopt(dist: Any, timeout: float, failure_wait: float) -> _State:
    """The default group the program set up itself (its store, under this attempt's prefix)."""
    store = dist.distributed_c10d._get_default_store()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or "0")
    world = World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0") or "0"), attempt,
                  str(dist.get_backend()), socket.gethostname())
    return _State(world, dist.PrefixStore(PREFIX.format(attempt=attempt), store), timeout, failure_wait, ours=False)


def world() -> World:
    """This process's ``World``: set up by ``init()``, else a world of this process alone."""
    return _STATE.world if _STATE is not None else World(0, 1)


def state() -> _State:
    if _STATE is None:
        raise DistError("algoswap.dist.init() was not called: no group of processes is set up")
    return _STATE


def new_group(name: str, ranks: Sequence[int], timeout: float | None = None) -> Group:
    """A group of ``ranks`` (world ranks; rank i of the group is the i-th smallest) named ``name``, for the
    ``group=`` attribute of communication ops, whose collectives fail after ``timeout`` seconds (default: the
    world's). Every rank must call it, in the same order, members or not."""
    import torch.distributed as dist

    current = state()
    members = tuple(sorted(int(r) for r in ranks))  # torch numbers a group's ranks in the world's order
    if not members or len(set(members)) != len(members) or not all(0 <= r < current.world.size for r in members):
        raise DistError(f"new_group({name!r}): ranks {list(ranks)} must be distinct ranks of the world (0..{current.world.size - 1})")
    if name == WORLD or find_group(name) is not None:
        raise DistError(f"new_group: a group named {name!r} exists already")
    handle = dist.new_group(list(members), timeout=timedelta(seconds=current.timeout if timeout is None else timeout))
    mine = members.index(current.world.rank) if current.world.rank in members else -1
    group = Group(name, members, mine, handle)
    add_group(group)
    return group


def shutdown() -> None:
    """Leave the group of processes (torch's default group too, where ``init()`` set it up; at exit, if the
    program has not)."""
    global _STATE
    if _STATE is None:
        return
    import torch.distributed as dist

    if _STATE.ours and dist.is_initialized():
        dist.destroy_process_group()
    _STATE = None
    clear_groups()
