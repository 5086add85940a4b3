"""Inference batch norm (and with an activation after it) through torch on the mps device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._torch import on_tensors
from .conv import ACTIVATIONS


def _batchnorm(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, weight: torch.Tensor | None,
               bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.batch_norm(x, mean, var, weight, bias, training=False, eps=eps)


@on_tensors
def batchnorm2d(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, *, eps: float) -> torch.Tensor:
    return _batchnorm(x, running_mean, running_var, weight, bias, eps)


@on_tensors
def batchnorm2d_fused(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                      weight: torch.Tensor | None, bias: torch.Tensor | None, *, eps: float, activation: str) -> torch.Tensor:
    return ACTIVATIONS[activation](_batchnorm(x, running_mean, running_var, weight, bias, eps))
