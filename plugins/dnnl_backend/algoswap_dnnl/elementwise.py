"""add on the oneDNN binary primitive (binary_add), and the broadcasting rules of every binary op.

oneDNN broadcasts only its second source: a (op) b runs when one operand has the output's shape and
the other (its shape padded with leading 1s) has each dimension equal to it or 1. When a is the
broadcast one, the operands are swapped: add and mul commute, and b - a or b / a is turned back
into a - b or a / b by a post-op of the same primitive (eltwise linear -x, eltwise pow x ** -1).

The primitive runs in the memory order of the operand of the output's shape (channels-last stays
channels-last, without a copy): the other operands are seen in that order too, which for a
squeeze-and-excitation gate (N, C, 1, 1) on an NHWC activation is (N, 1, 1, C), no copy either.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._ext import dnnl, refusal, too_many_dims
from ._layout import elementwise, memory_order

Shape = tuple[int, ...]
# A post-op: (kind, its array or None, alpha, beta); see dnnl.binary.
Post = tuple[str, Any, float, float]
_SWAP_BACK: dict[str, list[Post]] = {"add": [], "mul": [], "sub": [("linear", None, -1.0, 0.0)],
                                     "div": [("pow", None, 1.0, -1.0)]}
REFERENCE_KERNEL = ("oneDNN 3.2 has only its reference kernel (ref:any) for this broadcast of {b} onto {a}: measured 38x "
                    "slower than NumPy (mul of (64, 256, 28, 28) by (28, 1): 804 vs 21 ms; benchmarks/dnnl_ops.py)")


def _broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b), 1)
    pa, pb = _pad(a, rank), _pad(b, rank)
    return tuple(max(x, y) if 1 in (x, y) else x for x, y in zip(pa, pb))


def _pad(shape: Shape, rank: int) -> Shape:
    return (1,) * (rank - len(shape)) + tuple(shape)


def operands(a: Shape, b: Shape) -> tuple[bool, Shape, Shape] | str:
    """(swapped, full shape, broadcast shape padded to its rank), or why oneDNN binary cannot run it."""
    out = _broadcast(a, b)
    pa, pb = _pad(a, len(out)), _pad(b, len(out))
    if pa == out:
        return False, pa, pb
    if pb == out:
        return True, pb, pa
    return (f"oneDNN binary broadcasts only one operand (src1) onto the other's shape: neither {a} nor {b} "
            f"has the output shape {out}")


def binary(kind: str, a: np.ndarray, b: np.ndarray, post: Sequence[Post] = ()) -> np.ndarray:
    """a (kind) b, then the post-ops (their arrays broadcast like b), one operand broadcast onto the
    other's shape (see ``operands``). Same-shape operands without post-ops are run in a's memory
    order (channels-last stays channels-last)."""
    if a.shape == b.shape and a.ndim > 0 and not post:  # the common case, without the broadcast bookkeeping
        return elementwise(lambda x, y: dnnl.binary(x, y, kind), a, b)
    found = operands(a.shape, b.shape)
    if isinstance(found, str):
        raise ValueError(f"algoswap_dnnl {kind}: {found}")
    swapped, full, part = found
    src0, src1 = (b, a) if swapped else (a, b)
    shape = full if a.ndim or b.ndim else ()  # 0-D for two 0-D operands (run as 1-D)
    if 0 in full:
        return np.empty(shape, np.float32)
    memory, order = memory_order(src0.reshape(full))
    permuted = order != tuple(range(len(full)))

    def ordered(x: np.ndarray) -> np.ndarray:
        """x (of a shape that broadcasts to the output's) seen in src0's memory order, C-contiguous."""
        padded = x.reshape(_pad(x.shape, len(full)))
        return np.ascontiguousarray(padded.transpose(order) if permuted else padded)

    steps = [(k, None if x is None else ordered(x), alpha, beta)
             for k, x, alpha, beta in (_SWAP_BACK[kind] if swapped else []) + list(post)]
    out = dnnl.binary(memory, ordered(src1), kind, steps)
    out = out.transpose(np.argsort(order)) if permuted else out
    return out if out.shape == shape else out.reshape(shape)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b (one operand may broadcast onto the other's shape)."""
    return binary("add", a, b)


def plan(call: Any, kind: str, a: str = "a", b: str = "b", post: Sequence[Post] = ()) -> Any:
    """The cached primitive of ``kind`` for the call's inputs ``a`` and ``b``, and post-ops whose
    arrays are named by input (ValueError: why none)."""
    found = operands(call.shape(a), call.shape(b))
    if isinstance(found, str):
        raise ValueError(found)
    swapped, full, part = found
    steps = [(k, None if name is None else list(_pad(call.shape(name), len(full))), alpha, beta)
             for k, name, alpha, beta in (_SWAP_BACK[kind] if swapped else []) + list(post)]
    return dnnl.binary_impl(list(full), list(part), kind, dtype=call.dtype, post=steps)


def supports_binary(call: Any, kind: str, a: str = "a", b: str = "b", post: Sequence[Post] = ()) -> bool | str:
    found = operands(call.shape(a), call.shape(b))
    if isinstance(found, str):
        return found
    if 0 in found[1]:
        return True  # an empty output: nothing reaches oneDNN
    too_many = too_many_dims([found[1]]) if found[1] != found[2] else ""  # same shapes run as one flat array
    if too_many:
        return too_many
    answer = refusal(lambda: plan(call, kind, a, b, post), call.dtype)
    if answer is True and str(plan(call, kind, a, b, post).impl).startswith("ref"):
        full, part = (b, a) if found[0] else (a, b)
        return REFERENCE_KERNEL.format(a=call.shape(full), b=call.shape(part))
    return answer


def supports(call: Any) -> bool | str:
    return supports_binary(call, "add")


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(plan(call, "add"))
