"""The comm family on gloo, for host numpy arrays (torch views them through ``torch.from_numpy``)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from . import _collectives as _c


def _tensor(array: np.ndarray) -> torch.Tensor:
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: through an int16 view
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


HOST = _c.Arrays(np, _tensor)
allreduce = functools.partial(_c.allreduce, HOST)
allreduce_grad = functools.partial(_c.allreduce_grad, HOST)
allreduce_start = functools.partial(_c.allreduce_start, HOST)
comm_wait = functools.partial(_c.comm_wait, HOST)
allgather = functools.partial(_c.allgather, HOST)
reduce_scatter = functools.partial(_c.reduce_scatter, HOST)
broadcast = functools.partial(_c.broadcast, HOST)
broadcast_grad = functools.partial(_c.broadcast_grad, HOST)
all_to_all = functools.partial(_c.all_to_all, HOST)
sendrecv = functools.partial(_c.sendrecv, HOST)
