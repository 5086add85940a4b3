"""Checkpoints of executor programs across ranks: rank 0 writes one file, every rank reads it.

The file holds ``Executor.state_dict()`` (parameters, optimizer state, step counts, loader positions and
random generators) and what the caller adds (``extra``: an epoch number, a loss history). The shards of a
row-sharded table, and their optimizer state, are gathered to rank 0 and handed back to each rank by its
rank (resuming needs as many ranks). The file is written to a temporary name and renamed, so a crash while
writing leaves the previous checkpoint whole. It is a pickle: load only checkpoints you wrote.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from .._groups import WORLD, find_group
from .._global import get_registry
from ..graph import Executor, topological
from ._embedding import is_sharded
from ._failure import guarded, next_number
from ._world import DistError, world


def save_checkpoint(executor: Executor, path: str | os.PathLike[str], extra: Any = None) -> None:
    """Write the executor's state (and ``extra``) to ``path`` from rank 0; every rank returns once it is written."""
    state = executor.state_dict()
    here = world()
    state["extra"], state["world_size"], state["shards"] = extra, here.size, {}
    for kind, names in _sharded(executor).items():
        for name in names:
            state["shards"].setdefault(kind, {})[name] = _gather(state[kind].pop(name), here.size)
    if here.is_main:
        target = Path(path)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as file:
            pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    _barrier("checkpoint written")


def load_checkpoint(executor: Executor, path: str | os.PathLike[str]) -> Any:
    """Load the checkpoint at ``path`` into the executor (every rank reads it); returns its ``extra``."""
    with open(path, "rb") as file:
        state = pickle.load(file)
    here = world()
    shards = state.pop("shards", {})
    if shards and state.get("world_size") != here.size:
        raise DistError(f"checkpoint {os.fspath(path)!r} holds the shards of {state.get('world_size')} ranks; this run has "
                        f"{here.size}")
    for kind, named in shards.items():
        for name, parts in named.items():
            state[kind][name] = parts[here.rank]
    extra = state.pop("extra", None)
    state.pop("world_size", None)
    executor.load_state_dict(state)
    return extra


def _sharded(executor: Executor) -> dict[str, list[str]]:
    """The names of the shards of row-sharded tables, and of the optimizer variables updated with them."""
    nodes = topological([n for outputs in executor.subgraphs.values() for n in outputs])
    params = [n.name for n in nodes if n.kind == "parameter" and is_sharded(n)]
    variables = []
    for node in nodes:
        if node.kind == "op" and node.inputs and node.inputs[0] is not None and is_sharded(node.inputs[0]):
            spec = get_registry().spec(str(node.op))
            variables += [i.name for name, i in zip(spec.input_names, node.inputs)
                          if i is not None and i.kind == "variable" and name in spec.in_place]
    return {kind: names for kind, names in (("parameters", params), ("variables", variables)) if names}


def _gather(array: Any, size: int) -> list[Any]:
    """Every rank's ``array``, in rank order, on rank 0 (others get an empty list)."""
    if size == 1:
        return [array]
    import torch.distributed as dist

    group = find_group(WORLD)
    assert group is not None
    gathered: list[Any] = [None] * size if world().is_main else []
    guarded(group, "gathering a sharded table for a checkpoint", next_number(group),
            lambda: dist.gather_object(array, gathered if world().is_main else None, dst=0))
    return gathered


def _barrier(what: str) -> None:
    group = find_group(WORLD)
    if group is None or group.size == 1:
        return
    import torch.distributed as dist

    guarded(group, f"barrier ({what})", next_number(group), dist.barrier)

