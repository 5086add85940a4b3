"""dropout and its gradient, with a mask every backend can reproduce.

The mask is a pure function of (seed, flat index), so the gradient recomputes it instead of
storing it, and every backend draws the same mask: element i (row-major) is kept when
splitmix64(splitmix64(seed) + i) / 2**64 >= p (64-bit wrapping arithmetic; splitmix64 as in
Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014).
"""

from __future__ import annotations

from typing import Any

from .._spec import Attr, GradRule, Input, OpCall, OpSpec
from ._convert import boolean, expected, expecting, integer, real


@expecting("an int in [0, 2**64)")
def _seed(value: Any) -> int:
    seed: int = integer(0)(value)
    if seed >= 2**64:
        raise ValueError(expected(_seed))
    return seed


_ATTRS = (
    Attr("p", 0.5, real(0.0, 1.0, open_max=True), "the probability of zeroing an element, in [0, 1)"),
    Attr("seed", convert=_seed, doc="selects the mask: the same seed and shape give the same mask"),
    Attr("training", True, boolean, "False: the identity"),
)


def _same(call: OpCall) -> dict[str, Any]:
    return dict(call.attrs)


def _pair(name: str, ranks: tuple[int, ...] | None, what: str, doc: str) -> tuple[OpSpec, OpSpec]:
    forward = OpSpec(
        name, (Input("input", ranks),), _ATTRS,
        shape_rule=lambda shapes, attrs: shapes["input"], family="dropout",
        gradients=(GradRule("input", f"{name}_grad", ("grad_output",), _same),), doc=doc,
    )
    gradient = OpSpec(
        f"{name}_grad", (Input("grad_output", ranks),), _ATTRS,
        shape_rule=lambda shapes, attrs: shapes["grad_output"], family="dropout", grad_of=name,
        doc=f"Gradient of {name}: grad_output through the same {what} and scale (recomputed from the seed).",
    )
    return forward, gradient


dropout, dropout_grad = _pair(
    "dropout", None, "mask",
    "Each element zeroed with probability p, the others scaled by 1 / (1 - p), like torch's dropout "
    "in training mode; the mask is a function of seed and position only (see algoswap._specs.dropout).",
)
dropout2d, dropout2d_grad = _pair(
    "dropout2d", (4,), "channel mask",
    "Each channel of each sample of NCHW input zeroed with probability p, the others scaled by 1 / (1 - p), "
    "like torch.nn.functional.dropout2d; channel (n, c) is kept as element n * C + c of dropout's mask.",
)

SPECS = (dropout, dropout_grad, dropout2d, dropout2d_grad)
