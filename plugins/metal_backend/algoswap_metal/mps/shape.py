"""flatten, reshape and concat on mps tensors (the first two: views, no kernel)."""

from __future__ import annotations

import torch

from .._device import MpsArray
from ._torch import on_tensors


def flatten(x: MpsArray, *, start_dim: int, end_dim: int) -> MpsArray:
    if x.ndim == 0:
        return x.reshape((1,))
    shape = x.shape
    merged = 1
    for size in shape[start_dim : end_dim + 1]:
        merged *= size
    return x.reshape(shape[:start_dim] + (merged,) + shape[end_dim + 1 :])


def reshape(x: MpsArray, *, shape: tuple[int, ...]) -> MpsArray:
    return x.reshape(shape)


@on_tensors
def concat(*inputs: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.cat(inputs, axis)
