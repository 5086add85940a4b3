"""The op specs the core declares; plugins may declare more through the registry."""

from __future__ import annotations

from .._spec import OpSpec
from . import activation, conv, elementwise, linear, norm, pool, shape, softmax


def core_specs() -> tuple[OpSpec, ...]:
    """Every op spec of the core, in a stable order."""
    return (
        conv.SPECS + linear.SPECS + pool.SPECS + activation.SPECS + shape.SPECS + elementwise.SPECS + norm.SPECS
        + softmax.SPECS
    )
