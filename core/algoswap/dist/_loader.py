"""The data of data-parallel training: each rank's share of the same global batches."""

from __future__ import annotations

from typing import Any

from .._groups import WORLD, find_group, group_size
from ..graph import DataLoader, GraphError


class ShardedLoader(DataLoader):
    """A ``DataLoader`` of global batches of ``batch_size`` rows, of which this rank gets its share: every
    rank of ``group`` draws the same seeded order, and rank r of n takes rows [r * b / n, (r + 1) * b / n)
    of each global batch (``batch_size`` a multiple of n; short last batches are dropped). One epoch is the
    same batches as a ``DataLoader`` with the same seed gives a single process, split among the ranks."""

    def __init__(self, *arrays: Any, batch_size: int, shuffle: bool = True, seed: int = 0, group: str = WORLD) -> None:
        ranks = group_size(group)
        if not isinstance(batch_size, int) or batch_size % ranks:
            raise GraphError(f"ShardedLoader: batch_size {batch_size!r} must be a multiple of the {ranks} ranks of group {group!r}")
        super().__init__(*arrays, batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=True)
        found = find_group(group)
        self.rank = found.rank if found is not None else 0
        self.share = batch_size // ranks

    @property
    def batch_rows(self) -> int:
        return self.share

    def part(self, start: int, end: int) -> tuple[int, int]:
        first = start + self.rank * self.share
        return first, first + self.share
