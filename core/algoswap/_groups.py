"""The groups of processes communication ops name by attribute (``group="world"``), and their sizes.

``algoswap.dist`` fills this table when it sets up torch.distributed (``init()``, ``new_group()``); the
comm family's shape rules read each group's size from it when a call is bound, so that every rank
infers the same shapes. Nothing here imports torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidSpec

WORLD = "world"


@dataclass(frozen=True)
class Group:
    """A group of ranks: its name, its ranks (in the world's numbering), this process's rank in it
    (-1 where it is not a member) and the communication library's handle (a torch ProcessGroup; None
    for the world, which is torch's default group)."""

    name: str
    ranks: tuple[int, ...]
    rank: int
    handle: Any = None

    @property
    def size(self) -> int:
        return len(self.ranks)


_GROUPS: dict[str, Group] = {}


def add_group(group: Group) -> None:
    """Declare a group (replacing one of the same name)."""
    _GROUPS[group.name] = group


def clear_groups() -> None:
    """Forget every group (``algoswap.dist.shutdown()``)."""
    _GROUPS.clear()


def find_group(name: str) -> Group | None:
    return _GROUPS.get(name)


def group_size(name: str) -> int:
    """The number of ranks of group ``name``; the world of a process not set up for communication is
    this process alone, unless torchrun says otherwise (``WORLD_SIZE``): then ``algoswap.dist.init()``
    must come first, never a silent world of one. Raises InvalidSpec naming the group."""
    group = _GROUPS.get(name)
    if group is not None:
        return group.size
    launched = int(os.environ.get("WORLD_SIZE", "1") or "1")
    if name == WORLD and launched <= 1:
        return 1
    if name == WORLD:
        raise InvalidSpec("group", name, f"a world set up by algoswap.dist.init() first: WORLD_SIZE={launched} says "
                          f"this process is one of {launched} ranks")
    known = ", ".join(sorted({WORLD, *_GROUPS})) or WORLD
    raise InvalidSpec("group", name, f"a group set up by algoswap.dist.new_group() (known: {known})")
