"""Folding a constant per-feature scale into the linear before it: ConvNeXt's layer scale.

``mul(linear(x, W, b), gamma)``, or ``mul(permute(linear(x, W, b)), gamma)`` (torchvision's and timm's
ConvNeXt blocks scale after permuting back to NCHW), where ``gamma`` is a weight that varies along the
linear's output features only, is ``linear(x, W * gamma[:, None], b * gamma)`` (then the permute): one
step less per block, on every backend. The scaled weights are computed once, in float64, when the
model is converted; the mul becomes an alias of what it scaled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import fx

from .lowered import Alias, LoweredOp


@dataclass(frozen=True)
class LayerScale:
    """A mul found to fold: the fx node it scales (``source``), the linear's fx node and op, and the
    scale as a vector over the linear's output features."""

    source: fx.Node
    linear_node: fx.Node
    linear: LoweredOp
    scale: torch.Tensor


def find_layer_scale(mul: LoweredOp, lowered: Mapping[fx.Node, Any], constants: Mapping[fx.Node, Any],
                     sole_reader: Callable[[fx.Node, fx.Node], bool], rank_of: Callable[[fx.Node], int | None]) -> LayerScale | None:
    """The fold of ``mul`` if one operand is a constant tensor and the other a linear (through at most
    one literal permute) that nothing else reads, the constant varying along the linear's features alone."""
    if mul.op != "mul" or len(mul.inputs) != 2:
        return None
    for source, other in (mul.inputs, mul.inputs[::-1]):
        gamma = constants.get(other) if isinstance(other, fx.Node) else other
        if isinstance(source, fx.Node) and isinstance(gamma, torch.Tensor):
            found = _scaled_linear(source, gamma, lowered, constants, sole_reader, rank_of)
            if found is not None:
                return found
    return None


def _scaled_linear(source: fx.Node, gamma: torch.Tensor, lowered: Mapping[fx.Node, Any], constants: Mapping[fx.Node, Any],
                   sole_reader: Callable[[fx.Node, fx.Node], bool], rank_of: Callable[[fx.Node], int | None]) -> LayerScale | None:
    linear_node = _through_aliases(source, lowered, sole_reader)
    entry, perm = lowered.get(linear_node), None
    if isinstance(entry, LoweredOp) and entry.op == "transpose" and isinstance(entry.attrs.get("perm"), tuple):
        inner = entry.inputs[0]
        if not isinstance(inner, fx.Node) or not sole_reader(inner, linear_node):
            return None
        linear_node = _through_aliases(inner, lowered, sole_reader)
        perm, entry = entry.attrs["perm"], lowered.get(linear_node)
    if not isinstance(entry, LoweredOp) or entry.op != "linear" or len(entry.inputs) != 3:
        return None
    weight, bias = _value(entry.inputs[1], constants), _value(entry.inputs[2], constants)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not (bias is None or isinstance(bias, torch.Tensor)):
        return None
    rank = len(perm) if perm is not None else rank_of(source)
    if rank is None or not gamma.is_floating_point() or gamma.dim() > rank:
        return None
    axis = perm.index(rank - 1) if perm is not None else rank - 1  # where the linear's features are in the mul
    padded = (1,) * (rank - gamma.dim()) + tuple(gamma.shape)
    if any(size != 1 for i, size in enumerate(padded) if i != axis) or padded[axis] not in (1, weight.shape[0]):
        return None
    scale = gamma.detach().reshape(-1).expand(weight.shape[0])
    return LayerScale(source, linear_node, entry, scale)


def _through_aliases(node: fx.Node, lowered: Mapping[fx.Node, Any], sole_reader: Callable[[fx.Node, fx.Node], bool]) -> fx.Node:
    """The node whose value ``node`` is, through aliases read by nothing else (timm's dropouts in eval mode)."""
    while True:
        entry = lowered.get(node)
        if not isinstance(entry, Alias) or not isinstance(entry.source, fx.Node) or not sole_reader(entry.source, node):
            return node
        node = entry.source


def _value(value: Any, constants: Mapping[fx.Node, Any]) -> Any:
    return constants.get(value, value) if isinstance(value, fx.Node) else value


def scale_linear(found: LayerScale, constants: Mapping[fx.Node, Any]) -> None:
    """Replace the linear's weight and bias by their scaled copies (float64, rounded when frozen)."""
    linear = found.linear
    weight, bias = _value(linear.inputs[1], constants), _value(linear.inputs[2], constants)
    with torch.no_grad():
        scale = found.scale.double()
        scaled_bias = None if bias is None else bias.double() * scale
        linear.inputs[1:3] = [weight.double() * scale.reshape(-1, 1), scaled_bias]
