"""Training across processes with the executor, on torch.distributed, launched by torchrun.

    >>> from algoswap import dist, graph as g
    >>> here = dist.init()                       # torchrun's ranks (or this process alone)
    >>> loader = dist.ShardedLoader(x, y, batch_size=64, seed=0)   # each rank's share of each global batch
    >>> train = dist.DataParallel(g.Adam(lr=1e-3)).minimize(loss)  # gradients averaged over the ranks

Communication itself is the core's ``comm`` op family (``g.allreduce(x, reduction="sum")``), served by
the ``algoswap-dist`` plugin (gloo, NCCL). Importing this module imports no torch; ``init()`` does.
A communication backend finds a call's group with ``find_group(name)`` and runs each collective through
``guarded(group, what, next_number(group), run)``, so that a failing peer is an error naming it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .._groups import WORLD, Group, find_group, group_size
from ._checkpoint import load_checkpoint, save_checkpoint
from ._data_parallel import DataParallel, broadcast_parameters
from ._embedding import ShardedEmbedding, is_sharded
from ._failure import PeerError, guarded, next_number
from ._loader import ShardedLoader
from ._log import MainRankOnly, print, progress
from ._send import recv, send
from ._world import DistError, World, init, new_group, shutdown, world

__all__ = [
    "DataParallel", "DistError", "Group", "MainRankOnly", "PeerError", "ProgramModule", "ShardedEmbedding",
    "ShardedLoader", "WORLD", "World", "broadcast_parameters", "find_group", "group_size", "guarded", "init",
    "is_sharded", "load_checkpoint", "new_group", "next_number", "print", "progress", "recv", "save_checkpoint", "send",
    "shutdown", "world",
]


def __getattr__(name: str) -> Any:
    """``ProgramModule`` (a torch module: torch is imported on first use)."""
    if name == "ProgramModule":
        value = importlib.import_module("._pipeline", __name__).ProgramModule
        globals()[name] = value
        return value
    raise AttributeError(f"module 'algoswap.dist' has no attribute {name!r}")
