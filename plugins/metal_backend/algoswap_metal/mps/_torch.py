"""What the mps modules share: implementations written on torch tensors, and gradients through torch's autograd."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from .._device import MpsArray, device

F = Callable[..., torch.Tensor]


def on_tensors(function: F) -> Callable[..., MpsArray]:
    """``function`` of torch tensors as an implementation on MpsArrays: each array argument (an absent optional
    input stays None) is passed as its tensor, the tensor returned comes back as an MpsArray."""

    @functools.wraps(function)
    def implementation(*arrays: MpsArray | None, **attrs: Any) -> MpsArray:
        return MpsArray(function(*(None if a is None else a.tensor for a in arrays), **attrs))

    return implementation


def vjp(forward: Callable[[torch.Tensor], torch.Tensor], at: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The gradient through ``forward`` at ``at`` of a loss whose gradient at the output is ``dy``."""
    with torch.enable_grad():
        leaf = at.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(forward(leaf), leaf, dy)
    return grad


def zeros(size: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """Where a gradient of a function linear in its input is taken (only the input's shape matters)."""
    return torch.zeros(tuple(size), dtype=like.dtype, device=device())
