"""Data-parallel training of executor graphs: every rank runs the same graph on its share of each global
batch, and the gradients are averaged over the ranks (a mean: a learning rate means what it means for
single-process training on the global batch) before the optimizer's updates."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .._groups import WORLD, group_size
from ..graph import Node, Optimizer, gradients, op, parameters_of
from ._embedding import is_sharded

EARLY, LATE = -1, 1  # scheduling priorities (Node.priority): start communication early, wait for it late


class DataParallel:
    """An optimizer whose updates use gradients averaged over the ranks of ``group``:
    ``train = dist.DataParallel(g.Adam(lr=1e-3)).minimize(loss)``.

    - Dense gradients are grouped into buckets of up to ``bucket_bytes`` in the order the backward pass makes
      them (the last layers' first), each bucket reduced by one allreduce begun as soon as its last gradient is
      computed and waited for only before the updates: the rest of the backward pass overlaps it.
    - An embedding table updated sparsely (replicated on every rank) gets the ranks' (indices, rows) pairs
      gathered (allgather), the rows divided by the number of ranks: the update of the global batch.
    - A row-sharded table (``ShardedEmbedding``) keeps each shard's gradient on its rank (divided likewise).
    - The parameters (but shards) are broadcast from rank ``root`` by the first run of each executor running
      the update, so that every rank starts from the same values.
    """

    def __init__(self, optimizer: Optimizer, group: str = WORLD, bucket_bytes: int = 25 * 2**20, root: int = 0) -> None:
        self.optimizer = optimizer
        self.group = group
        self.bucket_bytes = bucket_bytes
        self.root = root

    def minimize(self, loss: Node, params: Sequence[Node] | None = None, name: str | None = None) -> Node:
        """The update subgraph (a group node), as ``Optimizer.minimize`` but with reduced gradients."""
        params = list(params) if params is not None else parameters_of([loss])
        reduced = self.reduce(params, gradients(loss, params))
        node = self.optimizer.apply_gradients(params, reduced, name=name or "data_parallel_minimize")
        shared = [p for p in params if not is_sharded(p)]
        node.setup = lambda: broadcast_parameters(shared, self.group, self.root)
        return node

    def reduce(self, params: Sequence[Node], grads: Sequence[Node]) -> list[Node]:
        """Each parameter's gradient averaged over the ranks (see the class)."""
        size = group_size(self.group)
        reduced = list(grads)
        dense: list[int] = []
        for index, (param, grad) in enumerate(zip(params, grads)):
            if is_sharded(param):
                reduced[index] = _scaled(grad, 1.0 / size)
            elif grad.op == "embedding_grad":
                reduced[index] = self._gathered(grad, size)
            else:
                dense.append(index)
        for bucket in self._buckets([grads[i] for i in reversed(dense)], list(reversed(dense))):
            for index, value in zip(bucket, self._reduce_bucket([grads[i] for i in bucket])):
                reduced[index] = value
        return reduced

    def _buckets(self, grads: list[Node], positions: list[int]) -> list[list[int]]:
        """Consecutive gradients of one dtype, up to ``bucket_bytes`` each (a larger one alone)."""
        buckets: list[list[int]] = []
        filled, dtype = 0, ""
        for grad, position in zip(grads, positions):
            size = int(np.prod(grad.shape, dtype=np.int64)) * np.dtype(grad.dtype).itemsize
            if not buckets or grad.dtype != dtype or filled + size > self.bucket_bytes:
                buckets.append([])
                filled, dtype = 0, grad.dtype
            buckets[-1].append(position)
            filled += size
        return buckets

    def _reduce_bucket(self, grads: list[Node]) -> list[Node]:
        for grad in grads:
            grad.priority = EARLY
        if len(grads) == 1:
            flat = grads[0]
        else:
            flat = _early(op("concat", *[_early(op("reshape", g, shape=(-1,))) for g in grads], axis=0))
        started = _early(op("allreduce_start", flat, reduction="mean", group=self.group))
        done = op("comm_wait", started)
        done.priority = LATE
        if len(grads) == 1:
            return [done]
        sections = tuple(max(1, int(np.prod(g.shape, dtype=np.int64))) for g in grads)
        return [op("reshape", op("split", done, sections=sections, index=i), shape=g.shape) for i, g in enumerate(grads)]

    def _gathered(self, grad: Node, size: int) -> Node:
        """The sparse pair of every rank, joined in rank order, rows divided by the ranks' number."""
        rows, indices = grad.inputs[0], grad.inputs[1]
        assert rows is not None and indices is not None
        all_rows = op("allgather", rows, axis=0, group=self.group)
        all_indices = op("allgather", indices, axis=0, group=self.group)
        return op("embedding_grad", op("mul_scalar", all_rows, value=1.0 / size), all_indices, **grad.attrs)


def _early(node: Node) -> Node:
    node.priority = EARLY
    return node


def _scaled(grad: Node, factor: float) -> Node:
    """``grad`` times ``factor`` (a sparse pair: its rows)."""
    if grad.op == "embedding_grad":
        rows, indices = grad.inputs[0], grad.inputs[1]
        return op("embedding_grad", op("mul_scalar", rows, value=factor), indices, **grad.attrs)
    return op("mul_scalar", grad, value=factor)


def broadcast_parameters(params: Sequence[Node], group: str = WORLD, root: int = 0) -> None:
    """Every rank's parameters set to rank ``root``'s (host arrays, through torch.distributed)."""
    from .._groups import find_group

    found = find_group(group)
    if found is None or found.size == 1:
        return
    import torch
    import torch.distributed as torch_dist

    from ._failure import guarded, next_number

    for param in params:
        array = np.ascontiguousarray(param.value)
        tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16) if array.dtype.name == "bfloat16" \
            else torch.from_numpy(array)
        number = next_number(found)
        guarded(found, f"broadcast of parameter {param.name!r}", number,
                lambda: torch_dist.broadcast(tensor, src=found.ranks[root], group=found.handle))
        param.value = array

