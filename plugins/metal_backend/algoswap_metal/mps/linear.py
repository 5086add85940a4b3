"""linear and its gradients through torch on the mps device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._torch import on_tensors


@on_tensors
def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, b)


@on_tensors
def linear_grad_input(dy: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return dy @ w


@on_tensors
def linear_grad_weight(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return dy.reshape(-1, dy.shape[-1]).T @ x.reshape(-1, x.shape[-1])


@on_tensors
def linear_grad_bias(dy: torch.Tensor) -> torch.Tensor:
    return dy.reshape(-1, dy.shape[-1]).sum(dim=0)
