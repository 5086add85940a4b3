"""Parameters and optimizer variables an Executor keeps in a device's memory between runs.

A parameter or variable updated in place by an op that runs in a device's memory space (an
optimizer update on the GPU) lives there: it is uploaded once, read and updated there at every
run, and copied back into the node's host array only when someone reads ``node.value`` (which
also drops the device copy, so that a host-side change is uploaded at the next run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .._records import MemorySpace
from ._node import Node


@dataclass
class DeviceCopy:
    space: MemorySpace
    array: Any
    newer: bool = False  # updated on the device since it was uploaded


class Residence:
    """The device copies of one Executor, by node."""

    def __init__(self) -> None:
        self.copies: dict[int, DeviceCopy] = {}

    def value(self, node: Node, space: MemorySpace) -> Any:
        """``node``'s array in ``space``: the kept copy, or a new upload of its host array."""
        copy = self.copies.get(id(node))
        if copy is None or copy.space.name != space.name:
            copy = self.copies[id(node)] = DeviceCopy(space, space.upload(node.value))
            node.holder = self
        return copy.array

    def updated(self, nodes: Iterable[Node]) -> None:
        """These nodes' device copies were just updated in place."""
        for node in nodes:
            self.copies[id(node)].newer = True

    def bring_home(self, node: Node) -> None:
        """Copy a newer device copy into the node's host array (the same array object); drop the copy."""
        copy = self.copies.pop(id(node), None)
        if copy is not None and copy.newer:
            node.host[...] = copy.space.download(copy.array)

    def forget(self, node: Node) -> None:
        self.copies.pop(id(node), None)
