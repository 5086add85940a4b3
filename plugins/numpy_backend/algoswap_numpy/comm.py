"""Communication ops for a group of one rank: what each op means when the only rank is this process
(a group of more ranks needs a communication backend: ``pip install algoswap-dist``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def alone(call: Any) -> bool | str:
    """The NumPy reference serves groups of one rank."""
    size = call.attrs["size"]
    return True if size == 1 else (f"a group of {size} ranks needs a communication backend (algoswap-dist: gloo, nccl); "
                                   "the NumPy reference serves a group of one")


def allreduce(input: np.ndarray, *, reduction: str, group: str, size: int) -> np.ndarray:
    return input.copy()


def allreduce_grad(grad_output: np.ndarray, input: np.ndarray, output: np.ndarray, *, reduction: str, group: str,
                   size: int) -> np.ndarray:
    if reduction in ("sum", "mean"):
        return grad_output.copy()
    holds = (input == output) | (np.isnan(input) & np.isnan(output))
    return np.where(holds, grad_output, grad_output.dtype.type(0))


def allreduce_start(input: np.ndarray, *, reduction: str, group: str, size: int) -> np.ndarray:
    return input.copy()


def comm_wait(input: np.ndarray) -> np.ndarray:
    return input


def allgather(input: np.ndarray, *, axis: int, group: str, size: int) -> np.ndarray:
    return input.copy()


def reduce_scatter(input: np.ndarray, *, axis: int, group: str, size: int) -> np.ndarray:
    return input.copy()


def broadcast(input: np.ndarray, *, root: int, group: str, size: int) -> np.ndarray:
    return input.copy()


def broadcast_grad(grad_output: np.ndarray, *, root: int, group: str, size: int) -> np.ndarray:
    return grad_output.copy()


def all_to_all(input: np.ndarray, *, axis: int, group: str, size: int) -> np.ndarray:
    return input.copy()


def sendrecv(input: np.ndarray, *, send_to: int | None, recv_from: int | None, group: str, size: int) -> np.ndarray:
    if send_to != recv_from:
        raise ValueError(f"rank 0, alone in its group, sends to {send_to} and receives from {recv_from}: it can only "
                         "exchange with itself (both 0) or with nobody (both None)")
    return np.zeros_like(input) if recv_from is None else input.copy()


def shard_indices(indices: np.ndarray, *, rows: int, shards: int) -> np.ndarray:
    outside = (indices < 0) | (indices >= rows * shards)
    if outside.any():
        raise ValueError(f"index {indices[outside].flat[0]} is outside the table's {rows * shards} rows "
                         f"({shards} shards of {rows})")
    owner = indices // rows
    out = np.full((shards,) + indices.shape, rows, dtype=indices.dtype)
    for shard in range(shards):
        mine = owner == shard
        out[shard][mine] = indices[mine] - shard * rows
    return out
