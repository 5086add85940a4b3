"""Embedding tables across ranks (the parameter server's job, on collectives).

A replicated table is a plain ``g.parameter`` looked up with ``g.embedding``: every rank holds all of it,
and ``DataParallel`` gathers every rank's sparse gradient (indices, rows) before the same sparse update.
A row-sharded table (``ShardedEmbedding``) holds on each rank only its shard of consecutive rows; a lookup
routes each index to its shard's rank and the rows back, over two ``all_to_all``, and the gradient rows go
to the shards' ranks the same way (the gradient of all_to_all is all_to_all): each rank updates its own
rows, sparsely, with exactly the rows the single-process update would add.
"""

from __future__ import annotations

import weakref

import numpy as np

from .._groups import WORLD, find_group, group_size
from ..graph import Node, constant, op, parameter

_SHARDED: weakref.WeakSet[Node] = weakref.WeakSet()


def is_sharded(node: Node) -> bool:
    """Whether ``node`` is one rank's shard of a table (its gradient stays on this rank)."""
    return node in _SHARDED


class ShardedEmbedding:
    """Rows of ``table`` (num_embeddings, D), the same array on every rank, split among the ranks of
    ``group``: rank r keeps rows [r * rows, (r + 1) * rows) (``rows`` = ceil(num_embeddings / ranks)) in its
    parameter ``weight`` of rows + 1 rows, the last a row that stays zero (where other shards' indices point).
    Call it on a node of integer indices, the same on no two ranks necessarily: ``vectors = table(ids)``."""

    def __init__(self, name: str, table: np.ndarray, group: str = WORLD) -> None:
        table = np.asarray(table)
        if table.ndim != 2:
            raise ValueError(f"ShardedEmbedding {name!r}: the table must be 2-D (num_embeddings, D); got shape {table.shape}")
        self.group = group
        self.shards = group_size(group)
        found = find_group(group)
        self.rank = found.rank if found is not None else 0
        self.num_embeddings = table.shape[0]
        self.rows = -(-self.num_embeddings // self.shards)
        shard = np.zeros((self.rows + 1, table.shape[1]), table.dtype)
        own = table[self.rank * self.rows:(self.rank + 1) * self.rows]
        shard[:len(own)] = own
        self.weight = parameter(name, shard)
        _SHARDED.add(self.weight)
        owned = np.ones((self.rows + 1, 1), table.dtype)
        owned[self.rows] = 0
        self._owned = constant(owned, name=f"{name}_owned")

    def __call__(self, indices: Node) -> Node:
        """The rows of ``indices`` (any shape): an array of shape indices.shape + (D,)."""
        routes = op("shard_indices", indices, rows=self.rows, shards=self.shards)  # (shards,) + indices.shape
        asked = op("all_to_all", routes, axis=0, group=self.group)  # every rank's requests, in this shard's rows
        found = op("embedding", self.weight, asked)
        back = op("all_to_all", found, axis=0, group=self.group)  # block j: shard j's rows for these indices
        mask = op("embedding", self._owned, routes)  # 1 where shard j holds the index, else 0
        return op("reduce_sum", op("mul", back, mask), axes=0)

    def full_table(self, shards: list[np.ndarray]) -> np.ndarray:
        """The whole table from every rank's ``weight.value``, in rank order."""
        return np.concatenate([s[:self.rows] for s in shards])[:self.num_embeddings]
