"""softmax and log_softmax and their gradients through torch on the mps device."""

from __future__ import annotations

import torch

from ._torch import on_tensors

aten = torch.ops.aten


@on_tensors
def softmax(x: torch.Tensor, *, axis: int) -> torch.Tensor:
    return torch.softmax(x, axis)


@on_tensors
def softmax_grad(dy: torch.Tensor, y: torch.Tensor, *, axis: int) -> torch.Tensor:
    return aten._softmax_backward_data(dy, y, axis, y.dtype)


@on_tensors
def log_softmax(x: torch.Tensor, *, axis: int) -> torch.Tensor:
    return torch.log_softmax(x, axis)


@on_tensors
def log_softmax_grad(dy: torch.Tensor, y: torch.Tensor, *, axis: int) -> torch.Tensor:
    return aten._log_softmax_backward_data(dy, y, axis, y.dtype)
