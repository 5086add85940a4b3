"""add through torch on the mps device (broadcasting as the spec has it)."""

from __future__ import annotations

import torch

from ._torch import on_tensors


@on_tensors
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b
