"""Elementwise binary ops: add (NumPy broadcasting)."""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import GradRule, Input, OpSpec, Shape


def broadcast_shape(a: Shape, b: Shape) -> Shape:
    """NumPy's broadcast shape of ``a`` and ``b``; an error naming both when they do not broadcast."""
    rank = max(len(a), len(b))
    padded_a, padded_b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for size_a, size_b in zip(padded_a, padded_b):
        if size_a != size_b and 1 not in (size_a, size_b):
            raise InvalidSpec("b", f"shape {b}", f"a shape broadcastable with 'a' of shape {a} (sizes equal or 1, aligned from the last)")
        out.append(size_b if size_a == 1 else size_a)  # a size 1 stretches, to 0 too
    return tuple(out)


def _add_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    return broadcast_shape(shapes["a"], shapes["b"])


# The gradient of a broadcast operand is grad_output summed over its broadcast dimensions (sum_to_shape).
add = OpSpec(
    "add",
    (Input("a"), Input("b")),
    (),
    shape_rule=_add_shape,
    family="elementwise",
    gradients=(
        GradRule("a", "sum_to_shape", attrs=lambda call: {"shape": call.shape("a")}),
        GradRule("b", "sum_to_shape", attrs=lambda call: {"shape": call.shape("b")}),
    ),
    doc="a + b elementwise with NumPy broadcasting (like torch.add without alpha).",
)

SPECS = (add,)
