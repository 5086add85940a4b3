"""Minibatches from numpy arrays, shuffled with a seed, fed to the graph by data nodes."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ._node import GraphError, Node, unique_name


class DataLoader:
    """Minibatches of ``batch_size`` rows taken together from each array (same first dimension).

    ``shuffle``: a new permutation per epoch from ``numpy.random.default_rng(seed)``, so a seed
    gives the same batches on every run. ``drop_last`` (default: ``shuffle``) skips a short last batch.
    """

    def __init__(self, *arrays: Any, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool | None = None) -> None:
        if not arrays:
            raise GraphError("DataLoader: give one or more arrays")
        self.arrays = [np.ascontiguousarray(a) for a in arrays]
        rows = {len(a) for a in self.arrays}
        if len(rows) != 1:
            raise GraphError(f"DataLoader: the arrays have different numbers of rows {sorted(rows)}")
        self.rows = rows.pop()
        if not isinstance(batch_size, int) or not 1 <= batch_size <= self.rows:
            raise GraphError(f"DataLoader: batch_size got {batch_size!r}; expected an int in [1, {self.rows}]")
        self.batch_size, self.shuffle = batch_size, shuffle
        self.drop_last = shuffle if drop_last is None else drop_last
        self.rng = np.random.default_rng(seed)
        self.order = np.arange(self.rows)
        self.position = self.rows  # a new epoch starts at the first batch

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.rows, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: its position in the epoch, the epoch's order and its generator's state."""
        return {"position": self.position, "order": self.order.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (from ``state_dict``): the next batch is the one that would have come next."""
        order = np.asarray(state["order"])
        if order.shape != (self.rows,):
            raise GraphError(f"DataLoader.load_state_dict: the state is of a loader of {order.size} rows; this one has {self.rows}")
        self.position, self.order = int(state["position"]), order.copy()
        self.rng.bit_generator.state = state["rng"]

    def next_batch(self) -> tuple[np.ndarray, ...]:
        """The next minibatch of every array (a new epoch, reshuffled, once one is used up)."""
        end = self.position + self.batch_size
        if self.position >= self.rows or (self.drop_last and end > self.rows):
            if self.shuffle:
                self.order = self.rng.permutation(self.rows)
            self.position, end = 0, self.batch_size
        start, self.position = self.position, min(end, self.rows)
        first, last = self.part(start, self.position)
        if not self.shuffle:
            return tuple(a[first:last] for a in self.arrays)
        picked = self.order[first:last]
        return tuple(a[picked] for a in self.arrays)

    @property
    def batch_rows(self) -> int:
        """Rows of each batch it gives (data nodes have this many)."""
        return self.batch_size

    def part(self, start: int, end: int) -> tuple[int, int]:
        """The rows [start, end) of the epoch's order that make the batch given (all of them; a loader giving
        one rank's share of each batch narrows them)."""
        return start, end


def dataloader_op(loaders: Mapping[str, DataLoader], name: str | None = None) -> tuple[Node, ...]:
    """One data node per array of the loaders; each subgraph ("train", "validate") named in
    ``loaders`` is fed by its own loader, one batch per ``executor.run``."""
    if not loaders:
        raise GraphError("dataloader_op: give at least one {subgraph: DataLoader}")
    first = next(iter(loaders.values()))
    counts = {len(loader.arrays) for loader in loaders.values()}
    if counts != {len(first.arrays)}:
        raise GraphError("dataloader_op: every loader must hold the same number of arrays")
    base = name or unique_name("data")
    return tuple(
        Node(f"{base}_{index}", "data", (first.batch_rows,) + array.shape[1:], str(array.dtype), loaders=dict(loaders), component=index)
        for index, array in enumerate(first.arrays)
    )
