"""matmul and batch_matmul and their gradients on the oneDNN matmul primitive.

A transposed operand is read through swapped strides (never copied); batch operands are padded to
one rank with leading 1s, and oneDNN broadcasts a batch dimension of 1. Every gradient is one more
matmul: d op(a) = dy @ op(b)^T and d op(b) = op(a)^T @ dy, computed transposed (operands swapped)
when trans_a / trans_b asks for the gradient of the stored, transposed operand. A batch_matmul
gradient for an operand whose batch dimensions were broadcast must be summed over them: a
reduction, refused with the reason (oneDNN 3.2's reduction runs its reference kernel there).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._ext import dnnl, refusal, too_many_dims

Shape = tuple[int, ...]


class _Product(NamedTuple):
    """op(left) @ op(right) on stored arrays of these names and shapes."""
    left: str
    right: str
    trans_left: bool
    trans_right: bool


def _product(op: str, trans_a: bool, trans_b: bool) -> _Product:
    """Which stored arrays the op multiplies, and how each is transposed."""
    if op.endswith("_grad_a"):  # dy @ op(b)^T, or its transpose op(b) @ dy^T
        return _Product("b", "grad_output", trans_b, True) if trans_a else _Product("grad_output", "b", False, not trans_b)
    if op.endswith("_grad_b"):  # op(a)^T @ dy, or its transpose dy^T @ op(a)
        return _Product("grad_output", "a", True, trans_a) if trans_b else _Product("a", "grad_output", not trans_a, False)
    return _Product("a", "b", trans_a, trans_b)


def _padded(shape: Shape, rank: int) -> list[int]:
    return [1] * (rank - len(shape)) + list(shape)


def _run(op: str, arrays: dict[str, np.ndarray], trans_a: bool, trans_b: bool) -> np.ndarray:
    p = _product(op, trans_a, trans_b)
    left, right = np.ascontiguousarray(arrays[p.left]), np.ascontiguousarray(arrays[p.right])
    rank = max(left.ndim, right.ndim)
    out: np.ndarray = dnnl.matmul(left.reshape(_padded(left.shape, rank)), right.reshape(_padded(right.shape, rank)),
                                  None, p.trans_left, p.trans_right)
    return out


def matmul(a: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return _run("matmul", {"a": a, "b": b}, trans_a, trans_b)


def matmul_grad_a(dy: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return _run("matmul_grad_a", {"grad_output": dy, "b": b}, trans_a, trans_b)


def matmul_grad_b(dy: np.ndarray, a: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return _run("matmul_grad_b", {"grad_output": dy, "a": a}, trans_a, trans_b)


def batch_matmul(a: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(a) @ op(b) with a and b padded to one rank; the output has the broadcast batch dimensions."""
    return _run("batch_matmul", {"a": a, "b": b}, trans_a, trans_b)


def batch_matmul_grad_a(dy: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool, a_size: Shape) -> np.ndarray:
    """a's gradient (a's batch dimensions were not broadcast: see ``supports``)."""
    return _run("batch_matmul_grad_a", {"grad_output": dy, "b": b}, trans_a, trans_b).reshape(a_size)


def batch_matmul_grad_b(dy: np.ndarray, a: np.ndarray, *, trans_a: bool, trans_b: bool, b_size: Shape) -> np.ndarray:
    return _run("batch_matmul_grad_b", {"grad_output": dy, "a": a}, trans_a, trans_b).reshape(b_size)


# ---------------------------------------------------------------------- selection and kernels


def _plan(call: Any) -> Any:
    p = _product(call.op, call.attrs["trans_a"], call.attrs["trans_b"])
    left, right = call.shape(p.left), call.shape(p.right)
    rank = max(len(left), len(right))
    return dnnl.matmul_impl(_padded(left, rank), _padded(right, rank), False, p.trans_left, p.trans_right)


def _broadcast_operand(call: Any) -> str:
    """Why a batch_matmul gradient would need a reduction over broadcast batch dimensions ("" if not)."""
    size = call.attrs.get("a_size") or call.attrs.get("b_size")
    if size is None:
        return ""
    full = call.shape("grad_output")
    if _padded(size[:-2], len(full) - 2) == list(full[:-2]):
        return ""
    return (f"the operand's batch dimensions {size[:-2]} were broadcast to {full[:-2]}: its gradient is summed over "
            "them, a reduction, and oneDNN 3.2's reduction primitive runs its reference kernel for it")


def supports(call: Any) -> bool | str:
    """oneDNN is asked: True if it makes the primitive for this call, else its refusal."""
    if 0 in call.out_shape or any(0 in call.shape(n) for n in call.input_names if call.shape(n) is not None):
        return "empty operands are not passed to oneDNN's matmul"
    return too_many_dims(call.shapes) or _broadcast_operand(call) or refusal(lambda: _plan(call))


def kernel(call: Any) -> str:
    return str(_plan(call).impl)
