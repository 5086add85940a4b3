"""The comm family on torch.distributed, for the arrays of one memory space (``Arrays``: numpy arrays for
gloo, CuPy arrays for NCCL), which torch views without copying. Each collective runs within the group's
timeout; a failure becomes ``algoswap.dist.PeerError`` naming the ranks that stopped answering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from algoswap.dist import Group, find_group, guarded, next_number

# torch 2.13 renamed reduce_scatter_tensor (deprecated there) to reduce_scatter_single
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


@dataclass(frozen=True)
class Arrays:
    """One memory space's arrays as the collectives see them: ``xp`` (numpy or cupy) and ``tensor``, a
    torch view of a C-contiguous array sharing its memory."""

    xp: Any
    tensor: Callable[[Any], torch.Tensor]

    def copy(self, array: Any) -> Any:
        return self.xp.array(array, copy=True, order="C")

    def contiguous(self, array: Any) -> Any:
        return self.xp.ascontiguousarray(array)


def _group(name: str) -> Group:
    group = find_group(name)
    if group is None:
        raise RuntimeError(f"group {name!r} is not set up (algoswap.dist.init(), new_group())")
    return group


def _run(name: str, what: str, run: Callable[[Group], Any]) -> Any:
    group = _group(name)
    number = next_number(group)
    return guarded(group, what, number, lambda: run(group))


def _reduce(arrays: Arrays, out: Any, reduction: str, group: str, what: str) -> Any:
    """``out`` reduced in place over the group (a mean: summed, then divided by the group's size)."""
    _run(group, what, lambda g: dist.all_reduce(arrays.tensor(out), op=_OPS[reduction], group=g.handle))
    if reduction == "mean":
        out /= _group(group).size
    return out


def allreduce(arrays: Arrays, input: Any, *, reduction: str, group: str, size: int) -> Any:
    return _reduce(arrays, arrays.copy(input), reduction, group, f"allreduce ({reduction})")


def allreduce_grad(arrays: Arrays, grad_output: Any, input: Any, output: Any, *, reduction: str, group: str,
                   size: int) -> Any:
    if reduction in ("sum", "mean"):
        return _reduce(arrays, arrays.copy(grad_output), reduction, group, f"allreduce_grad ({reduction})")
    total = _reduce(arrays, arrays.copy(grad_output), "sum", group, "allreduce_grad (sum)")
    xp = arrays.xp
    holds = ((input == output) | (xp.isnan(input) & xp.isnan(output))).astype(grad_output.dtype)
    count = _reduce(arrays, holds.copy(), "sum", group, "allreduce_grad (holders)")
    return xp.where(holds != 0, total / xp.maximum(count, 1), 0).astype(grad_output.dtype)


# Collectives begun and not yet waited for: id(result) -> (result, work, group, number, reduction)
_PENDING: dict[int, tuple[Any, Any, Group, int, str]] = {}


def allreduce_start(arrays: Arrays, input: Any, *, reduction: str, group: str, size: int) -> Any:
    out = arrays.copy(input)
    handle = _group(group)
    number = next_number(handle)
    work = guarded(handle, f"allreduce_start ({reduction})", number,
                   lambda: dist.all_reduce(arrays.tensor(out), op=_OPS[reduction], group=handle.handle, async_op=True))
    _PENDING[id(out)] = (out, work, handle, number, reduction)
    return out


def comm_wait(arrays: Arrays, input: Any) -> Any:
    entry = _PENDING.pop(id(input), None)
    if entry is None:  # nothing in flight: a result that was complete when returned
        return input
    out, work, group, number, reduction = entry
    guarded(group, f"allreduce_start ({reduction}), waited for", number, work.wait)
    if reduction == "mean":
        out /= group.size
    return out


def allgather(arrays: Arrays, input: Any, *, axis: int, group: str, size: int) -> Any:
    source = arrays.contiguous(input)
    parts = [arrays.xp.empty_like(source) for _ in range(size)]
    _run(group, "allgather", lambda g: dist.all_gather([arrays.tensor(p) for p in parts], arrays.tensor(source), group=g.handle))
    return arrays.xp.concatenate(parts, axis=axis)


def reduce_scatter(arrays: Arrays, input: Any, *, axis: int, group: str, size: int) -> Any:
    xp = arrays.xp
    source = arrays.contiguous(xp.moveaxis(input, axis, 0))
    out = xp.empty((source.shape[0] // size,) + source.shape[1:], source.dtype)
    _run(group, "reduce_scatter", lambda g: _REDUCE_SCATTER(arrays.tensor(out), arrays.tensor(source), group=g.handle))
    return arrays.contiguous(xp.moveaxis(out, 0, axis))


def all_to_all(arrays: Arrays, input: Any, *, axis: int, group: str, size: int) -> Any:
    xp = arrays.xp
    source = arrays.contiguous(xp.moveaxis(input, axis, 0))
    out = xp.empty_like(source)
    _run(group, "all_to_all", lambda g: dist.all_to_all_single(arrays.tensor(out), arrays.tensor(source), group=g.handle))
    return arrays.contiguous(xp.moveaxis(out, 0, axis))


def broadcast(arrays: Arrays, input: Any, *, root: int, group: str, size: int) -> Any:
    out = arrays.copy(input)
    _run(group, "broadcast", lambda g: dist.broadcast(arrays.tensor(out), src=g.ranks[root], group=g.handle))
    return out


def broadcast_grad(arrays: Arrays, grad_output: Any, *, root: int, group: str, size: int) -> Any:
    out = arrays.copy(grad_output)
    _run(group, "broadcast_grad", lambda g: dist.reduce(arrays.tensor(out), dst=g.ranks[root], group=g.handle))
    if _group(group).rank != root:
        out[...] = 0
    return out


def sendrecv(arrays: Arrays, input: Any, *, send_to: int | None, recv_from: int | None, group: str, size: int) -> Any:
    handle = _group(group)
    me = handle.rank
    if (send_to == me) != (recv_from == me):
        raise ValueError(f"rank {me} of group {group!r} sends to {send_to} and receives from {recv_from}: it exchanges "
                         "with itself only both ways")
    if send_to == me:
        return arrays.copy(input)
    out = arrays.xp.zeros_like(input)
    source = arrays.contiguous(input)

    def exchange(g: Group) -> None:
        ops = []
        if send_to is not None:
            ops.append(dist.P2POp(dist.isend, arrays.tensor(source), g.ranks[send_to], g.handle))
        if recv_from is not None:
            ops.append(dist.P2POp(dist.irecv, arrays.tensor(out), g.ranks[recv_from], g.handle))
        for work in dist.batch_isend_irecv(ops) if ops else ():
            work.wait()

    _run(group, f"sendrecv (to {send_to}, from {recv_from})", exchange)
    return out
