"""conv2d through torch on the mps device (MPSGraph's convolution), its fused twin and its gradients.

The canonical attributes map onto F.conv2d's, the padding (every mode, asymmetric too) done first by F.pad
(constant, reflect, replicate, circular): the convolution proper gets none. That costs a padded copy of the input,
and keeps the definition where a weight is infinite or NaN: a padding tap multiplies a zero (NaN), where torch's
padded convolutions may skip it (on the CPU they do: docs/development.md, "torch's own NaN behaviour")."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ._torch import on_tensors, vjp, zeros
from .activation import gelu_of

Pair = tuple[int, int]
PadHW = tuple[Pair, Pair]
_PAD_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate", "circular": "circular"}
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"none": lambda y: y, "relu": F.relu, "relu6": lambda y: F.hardtanh(y, 0.0, 6.0), "silu": F.silu,
               "hardswish": F.hardswish, "gelu": gelu_of}


def _conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *, stride: Pair, padding: PadHW, dilation: Pair,
          groups: int, padding_mode: str) -> torch.Tensor:
    (top, bottom), (left, right) = padding
    if top or bottom or left or right:
        x = F.pad(x, (left, right, top, bottom), mode=_PAD_MODES[padding_mode])
    return F.conv2d(x, w, b, stride, 0, dilation, groups)


@on_tensors
def conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, **attrs: Any) -> torch.Tensor:
    return _conv(x, w, b, **attrs)


@on_tensors
def conv2d_fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, residual: torch.Tensor | None, *,
                 activation: str, **attrs: Any) -> torch.Tensor:
    """The convolution, then the residual and the activation: three torch ops, each run on its own."""
    y = _conv(x, w, b, **attrs)
    if residual is not None:
        y = y + residual
    return ACTIVATIONS[activation](y)


@on_tensors
def conv2d_grad_input(dy: torch.Tensor, w: torch.Tensor, *, input_size: tuple[int, ...], **attrs: Any) -> torch.Tensor:
    return vjp(lambda x: _conv(x, w, None, **attrs), zeros(input_size, dy), dy)


@on_tensors
def conv2d_grad_weight(dy: torch.Tensor, x: torch.Tensor, *, weight_size: tuple[int, ...], **attrs: Any) -> torch.Tensor:
    return vjp(lambda w: _conv(x, w, None, **attrs), zeros(weight_size, dy), dy)


@on_tensors
def conv2d_grad_bias(dy: torch.Tensor) -> torch.Tensor:
    return dy.sum(dim=(0, 2, 3))

