"""The comm family on NCCL, for CuPy arrays in GPU memory (torch views them through DLPack: NCCL reads and
writes the arrays' own memory, no copy). CuPy, torch and the CUDA backend all run on the null stream."""

from __future__ import annotations

import functools

import cupy
import torch

from . import _collectives as _c

CUDA = _c.Arrays(cupy, torch.from_dlpack)
allreduce = functools.partial(_c.allreduce, CUDA)
allreduce_grad = functools.partial(_c.allreduce_grad, CUDA)
allreduce_start = functools.partial(_c.allreduce_start, CUDA)
comm_wait = functools.partial(_c.comm_wait, CUDA)
allgather = functools.partial(_c.allgather, CUDA)
reduce_scatter = functools.partial(_c.reduce_scatter, CUDA)
broadcast = functools.partial(_c.broadcast, CUDA)
broadcast_grad = functools.partial(_c.broadcast_grad, CUDA)
all_to_all = functools.partial(_c.all_to_all, CUDA)
sendrecv = functools.partial(_c.sendrecv, CUDA)
