"""The poolings and their gradients through torch on the mps device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._torch import on_tensors, vjp, zeros

Pair = tuple[int, int]


@on_tensors
def maxpool2d(x: torch.Tensor, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
              ceil_mode: bool) -> torch.Tensor:
    return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)


@on_tensors
def maxpool2d_grad(dy: torch.Tensor, x: torch.Tensor, *, kernel_size: Pair, stride: Pair, padding: Pair,
                   dilation: Pair, ceil_mode: bool) -> torch.Tensor:
    return vjp(lambda t: F.max_pool2d(t, kernel_size, stride, padding, dilation, ceil_mode), x, dy)


@on_tensors
def avgpool2d(x: torch.Tensor, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> torch.Tensor:
    return F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@on_tensors
def avgpool2d_grad(dy: torch.Tensor, *, input_size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> torch.Tensor:
    def forward(t: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(t, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)

    return vjp(forward, zeros(input_size, dy), dy)


@on_tensors
def adaptiveavgpool2d(x: torch.Tensor, *, output_size: Pair) -> torch.Tensor:
    return F.adaptive_avg_pool2d(x, output_size)


@on_tensors
def adaptiveavgpool2d_grad(dy: torch.Tensor, *, input_size: tuple[int, ...]) -> torch.Tensor:
    out_h, out_w = dy.shape[2:]
    return vjp(lambda t: F.adaptive_avg_pool2d(t, (out_h, out_w)), zeros(input_size, dy), dy)
