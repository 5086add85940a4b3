"""dropout and its gradient, with a mask every backend can reproduce.

The mask is a pure function of (seed, flat index), so the gradient recomputes it instead of
storing it, and every backend draws the same mask: element i (row-major) is kept when
splitmix64(splitmix64(seed) + i) / 2**64 >= p (64-bit wrapping arithmetic; splitmix64 as in
Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014).
"""

from __future__ import annotations

from typing import Any

from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import boolean, integer, real


def _seed(value: Any) -> int:
    seed: int = integer(0)(value)
    if seed >= 2**64:
        raise ValueError("an int in [0, 2**64)")
    return seed


_ATTRS = (
    Attr("p", 0.5, real(0.0, 1.0, open_max=True), "the probability of zeroing an element, in [0, 1)"),
    Attr("seed", convert=_seed, doc="selects the mask: the same seed and shape give the same mask"),
    Attr("training", True, boolean, "False: the identity"),
)


def _grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    shape: Shape = shapes["grad_output"]
    return shape


def _same(call: OpCall) -> dict[str, Any]:
    return dict(call.attrs)


dropout = OpSpec(
    "dropout", (Input("input"),), _ATTRS,
    shape_rule=lambda shapes, attrs: shapes["input"], family="dropout",
    gradients=(GradRule("input", "dropout_grad", ("grad_output",), _same),),
    doc="Each element zeroed with probability p, the others scaled by 1 / (1 - p), like torch's dropout "
    "in training mode; the mask is a function of seed and position only (see algoswap._specs.dropout).",
)
dropout_grad = OpSpec(
    "dropout_grad", (Input("grad_output"),), _ATTRS,
    shape_rule=_grad_shape, family="dropout", grad_of="dropout",
    doc="Gradient of dropout: grad_output through the same mask and scale (recomputed from the seed).",
)

SPECS = (dropout, dropout_grad)
