"""add on the oneDNN binary primitive (binary_add), and the broadcasting rules of every binary op.

oneDNN broadcasts only its second source: a (op) b runs when one operand has the output's shape and
the other (its shape padded with leading 1s) has each dimension equal to it or 1. Addition and
multiplication of floats commute, so for them either operand may be the broadcast one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from ._layout import elementwise

Shape = tuple[int, ...]
_COMMUTATIVE = ("add", "mul")
REFERENCE_KERNEL = ("oneDNN 3.2 has only its reference kernel (ref:any) for this broadcast of {b} onto {a}: measured 38x "
                    "slower than NumPy (mul of (64, 256, 28, 28) by (28, 1): 804 vs 21 ms; benchmarks/dnnl_ops.py)")


def _broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b), 1)
    pa, pb = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    return tuple(max(x, y) if 1 in (x, y) else x for x, y in zip(pa, pb))


def operands(a: Shape, b: Shape, kind: str = "add") -> tuple[bool, Shape, Shape] | str:
    """(swapped, full shape, broadcast shape padded to its rank), or why oneDNN binary cannot run it.
    Only add and mul may swap their operands (sub and div are not commutative)."""
    out = _broadcast(a, b)
    rank = len(out)
    pa, pb = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    if pa == out:
        return False, pa, pb
    if pb == out and kind in _COMMUTATIVE:
        return True, pb, pa
    if pb == out:
        return (f"oneDNN binary broadcasts only its second source: {kind} needs a {a} broadcast onto b {b}, "
                f"and {kind} does not commute")
    return (f"oneDNN binary broadcasts only one operand (src1) onto the other's shape: neither {a} nor {b} "
            f"has the output shape {out}")


def binary(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (kind) b, one operand broadcast onto the other's shape (see ``operands``). Same-shape
    operands are run in a's memory order (channels-last stays channels-last)."""
    if a.shape == b.shape and a.ndim > 0:  # the common case, without the broadcast bookkeeping
        return elementwise(lambda x, y: dnnl.binary(x, y, kind), a, b)
    plan = operands(a.shape, b.shape, kind)
    if isinstance(plan, str):
        raise ValueError(f"algoswap_dnnl {kind}: {plan}")
    swapped, full, part = plan
    src0, src1 = (b, a) if swapped else (a, b)
    shape = np.broadcast_shapes(a.shape, b.shape)  # 0-D for two 0-D operands (run as 1-D)
    if 0 in full:
        return np.empty(shape, np.float32)
    out = dnnl.binary(np.ascontiguousarray(src0).reshape(full), np.ascontiguousarray(src1).reshape(part), kind)
    return out.reshape(shape)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b (one operand may broadcast onto the other's shape)."""
    return binary("add", a, b)


def plan(call: Any, kind: str, a: str = "a", b: str = "b") -> Any:
    """The cached primitive of ``kind`` for the call's operands ``a`` and ``b`` (ValueError: why none)."""
    found = operands(call.shape(a), call.shape(b), kind)
    if isinstance(found, str):
        raise ValueError(found)
    return dnnl.binary_impl(list(found[1]), list(found[2]), kind, dtype=call.dtype)


def supports_binary(call: Any, kind: str, a: str = "a", b: str = "b") -> bool | str:
    found = operands(call.shape(a), call.shape(b), kind)
    if isinstance(found, str):
        return found
    if 0 in found[1]:
        return True  # an empty output: nothing reaches oneDNN
    answer = refusal(lambda: plan(call, kind, a, b), call.dtype)
    if answer is True and str(plan(call, kind, a, b).impl).startswith("ref"):
        return REFERENCE_KERNEL.format(a=call.shape(a), b=call.shape(b))
    return answer


def supports(call: Any) -> bool | str:
    return supports_binary(call, "add")


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(plan(call, "add"))
