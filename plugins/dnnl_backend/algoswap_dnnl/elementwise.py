"""add on the oneDNN binary primitive (binary_add).

oneDNN broadcasts only its second source: a + b runs when one operand has the output's shape and
the other (its shape padded with leading 1s) has each dimension equal to it or 1. Addition of
floats is commutative, so either operand may be the broadcast one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from ._layout import elementwise

Shape = tuple[int, ...]


def _broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b), 1)
    pa, pb = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    return tuple(max(x, y) if 1 in (x, y) else x for x, y in zip(pa, pb))


def _operands(a: Shape, b: Shape) -> tuple[bool, Shape, Shape] | str:
    """(swapped, full shape, broadcast shape padded to its rank), or why oneDNN binary cannot run it."""
    out = _broadcast(a, b)
    rank = len(out)
    pa, pb = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    if pa == out:
        return False, pa, pb
    if pb == out:
        return True, pb, pa
    return (f"oneDNN binary broadcasts only one operand (src1) onto the other's shape: neither {a} nor {b} "
            f"has the output shape {out}")


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b (one operand may broadcast onto the other's shape). Same-shape operands are added in
    a's memory order (channels-last stays channels-last)."""
    if a.shape == b.shape and a.ndim > 0:  # the common case, without the broadcast bookkeeping
        return elementwise(dnnl.add, a, b)
    plan = _operands(a.shape, b.shape)
    if isinstance(plan, str):
        raise ValueError(f"algoswap_dnnl add: {plan}")
    swapped, full, part = plan
    src0, src1 = (b, a) if swapped else (a, b)
    shape = np.broadcast_shapes(a.shape, b.shape)  # 0-D for two 0-D operands (run as 1-D)
    if 0 in full:
        return np.empty(shape, np.float32)
    out = dnnl.add(np.ascontiguousarray(src0).reshape(full), np.ascontiguousarray(src1).reshape(part))
    return out.reshape(shape)


def _plan(call: Any) -> Any:
    plan = _operands(call.shape("a"), call.shape("b"))
    if isinstance(plan, str):
        raise ValueError(plan)
    return dnnl.add_impl(list(plan[1]), list(plan[2]), dtype=call.dtype)


def supports(call: Any) -> bool | str:
    plan = _operands(call.shape("a"), call.shape("b"))
    if isinstance(plan, str):
        return plan
    if 0 in plan[1]:
        return True  # an empty output: nothing reaches oneDNN
    return refusal(lambda: _plan(call), call.dtype)


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(_plan(call).impl)
