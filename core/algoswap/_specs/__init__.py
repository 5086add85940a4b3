"""The op specs the core declares; plugins may declare more through the registry."""

from __future__ import annotations

from .._spec import OpSpec
from . import (
    activation, arith, conv, dropout, elementwise, indexing, linear, loss, matmul, norm, optim, pool, reduce, shape,
    slicing, softmax, sparse,
)


def core_specs() -> tuple[OpSpec, ...]:
    """Every op spec of the core, in a stable order."""
    return (
        conv.SPECS + linear.SPECS + pool.SPECS + activation.SPECS + shape.SPECS + elementwise.SPECS + norm.SPECS
        + softmax.SPECS + arith.SPECS + matmul.SPECS + reduce.SPECS + slicing.SPECS + indexing.SPECS + dropout.SPECS
        + loss.SPECS + sparse.SPECS + optim.SPECS
    )
