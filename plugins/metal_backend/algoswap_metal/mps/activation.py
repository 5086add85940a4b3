"""The activations and their gradients through torch on the mps device: torch's functions and its own backward
ops, whose arguments are the spec's (the gradients take dy first, then the forward's input, or its output for
sigmoid and tanh)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._torch import on_tensors

aten = torch.ops.aten


def gelu_of(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """torch's gelu, +inf kept as the definition has it (x * Phi(x) = inf): torch 2.13's vectorised float32 CPU kernel
    gives NaN there on AVX-512 (its scalar and float64 paths give inf), which the CPU stand-in for mps runs."""
    return torch.where(x == math.inf, x, F.gelu(x, approximate=approximate))


relu = on_tensors(F.relu)
sigmoid = on_tensors(torch.sigmoid)
tanh = on_tensors(torch.tanh)
leaky_relu = on_tensors(F.leaky_relu)
hardtanh = on_tensors(F.hardtanh)
silu = on_tensors(F.silu)
gelu = on_tensors(gelu_of)
hardswish = on_tensors(F.hardswish)
hardsigmoid = on_tensors(F.hardsigmoid)
elu = on_tensors(F.elu)
mish = on_tensors(F.mish)



sigmoid_grad = on_tensors(aten.sigmoid_backward)
tanh_grad = on_tensors(aten.tanh_backward)
silu_grad = on_tensors(aten.silu_backward)
gelu_grad = on_tensors(aten.gelu_backward)
hardswish_grad = on_tensors(aten.hardswish_backward)
hardsigmoid_grad = on_tensors(aten.hardsigmoid_backward)
mish_grad = on_tensors(aten.mish_backward)


@on_tensors
def relu_grad(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return aten.threshold_backward(dy, x, 0)


@on_tensors
def leaky_relu_grad(dy: torch.Tensor, x: torch.Tensor, *, negative_slope: float) -> torch.Tensor:
    return aten.leaky_relu_backward(dy, x, negative_slope, False)


@on_tensors
def hardtanh_grad(dy: torch.Tensor, x: torch.Tensor, *, min_val: float, max_val: float) -> torch.Tensor:
    return aten.hardtanh_backward(dy, x, min_val, max_val)


@on_tensors
def elu_grad(dy: torch.Tensor, x: torch.Tensor, *, alpha: float) -> torch.Tensor:
    return aten.elu_backward(dy, alpha, 1, 1, False, x)
