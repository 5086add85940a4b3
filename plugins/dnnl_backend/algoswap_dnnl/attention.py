"""scaled_dot_product_attention and its gradients composed of oneDNN primitives (the spec's computation:
see algoswap._specs.attention): eltwise linear scales the query (or the key), matmul makes the scores
(batch dimensions broadcast), binary adds the mask, softmax (softmax_accurate) weighs the keys, matmul
again makes the output; the gradients add the softmax's backward primitive. Rows of scores all -inf
(fully masked queries) get zero weights afterwards, found by a scan only where the scores are not all
finite. A gradient of an operand whose batch dimensions were broadcast would be a reduction: refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algoswap import attention_mask

from ._ext import dnnl, refusal, too_many_dims
from .elementwise import REFERENCE_KERNEL, binary
from .matmul import batch_matmul

Shape = tuple[int, ...]


def _scaled(a: np.ndarray, scale: float) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a if scale == 1.0 else dnnl.eltwise(a, "linear", float(scale), 0.0)


def _weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, is_causal: bool, scale: float) -> np.ndarray:
    scores = batch_matmul(_scaled(q, scale), k, trans_a=False, trans_b=True)
    added = attention_mask(mask, is_causal, q.shape[-2], k.shape[-2], np.dtype(np.float32), np)
    if added is not None:
        scores = binary("add", scores, added)
    weights: np.ndarray = dnnl.softmax(scores, -1, log=False)
    if not dnnl.all_finite(scores):
        weights[np.all(scores == -np.inf, axis=-1)] = 0.0
    return weights


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *, is_causal: bool,
                                 scale: float) -> np.ndarray:
    return batch_matmul(_weights(q, k, mask, is_causal, scale), v, trans_a=False, trans_b=False)


def _scores_grad(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, is_causal: bool,
                 scale: float) -> np.ndarray:
    """P * (dP - rowsum(dP * P)), dP = dy @ v^T (the scale is left to the products with it)."""
    d_weights = batch_matmul(dy, v, trans_a=False, trans_b=True)
    grad: np.ndarray = dnnl.softmax_grad(d_weights, _weights(q, k, mask, is_causal, scale), -1, log=False)
    return grad


def scaled_dot_product_attention_grad_query(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                            mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    d_scores = _scores_grad(dy, q, k, v, mask, is_causal, scale)
    return batch_matmul(d_scores, _scaled(k, scale), trans_a=False, trans_b=False).reshape(q.shape)


def scaled_dot_product_attention_grad_key(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                          mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    d_scores = _scores_grad(dy, q, k, v, mask, is_causal, scale)
    return batch_matmul(d_scores, _scaled(q, scale), trans_a=True, trans_b=False).reshape(k.shape)


def scaled_dot_product_attention_grad_value(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                            mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    weights = _weights(q, k, mask, is_causal, scale)
    return batch_matmul(weights, dy, trans_a=True, trans_b=False).reshape(v.shape)


# ---------------------------------------------------------------------- selection and kernels


def _padded(a: Shape, b: Shape) -> tuple[list[int], list[int]]:
    """Both shapes with leading 1s to one rank."""
    rank = max(len(a), len(b))
    return [1] * (rank - len(a)) + list(a), [1] * (rank - len(b)) + list(b)


def _products(call: Any, scores: Shape) -> list[tuple[Shape, Shape, bool, bool]]:
    """(left, right, trans_a, trans_b) of each product after the softmax."""
    if "grad_output" not in call.input_names:
        return [(scores, call.shape("value"), False, False)]
    dy = call.shape("grad_output")
    if call.op.endswith("_value"):
        return [(scores, dy, True, False)]
    wrt = "key" if call.op.endswith("_query") else "query"  # dQ = dS @ k, dK = dS^T @ q
    return [(dy, call.shape("value"), False, True), (scores, call.shape(wrt), call.op.endswith("_key"), False)]


def _plans(call: Any) -> list[tuple[str, Any]]:
    """(what, plan) of every primitive the call runs (ValueError: why one cannot be made)."""
    q, k = call.shape("query"), call.shape("key")
    scores = tuple(np.broadcast_shapes(q[:-2], k[:-2])) + (q[-2], k[-2])
    left, right = _padded(q, k)
    plans = [("matmul", dnnl.matmul_impl(left, right, False, False, True))]
    mask = (q[-2], k[-2]) if call.attrs["is_causal"] else call.shape("attn_mask")
    if mask is not None:
        full, part = _padded(scores, mask)
        add = dnnl.binary_impl(full, part, "add")
        if str(add.impl).startswith("ref"):
            raise ValueError(REFERENCE_KERNEL.format(a=scores, b=mask))
        plans.append(("binary add", add))
    plans.append(("softmax", dnnl.softmax_impl(list(scores), -1)))
    if "grad_output" in call.input_names and not call.op.endswith("_value"):
        plans.append(("softmax backward", dnnl.softmax_grad_impl(list(scores), -1)))
    for a, b, trans_a, trans_b in _products(call, scores):
        left, right = _padded(a, b)
        plans.append(("matmul", dnnl.matmul_impl(left, right, False, trans_a, trans_b)))
    return plans


def _broadcast_operand(call: Any) -> str:
    """Why a gradient would be summed over broadcast batch dimensions ("" if not)."""
    if "grad_output" not in call.input_names:
        return ""
    wrt = call.op.rpartition("_")[2]
    batch = call.shape("grad_output")[:-2]
    own = call.shape(wrt)[:-2]
    if _padded(own, batch)[0] == list(batch):
        return ""
    return (f"the {wrt}'s batch dimensions {own} were broadcast to {batch}: its gradient is summed over them, a "
            "reduction oneDNN 3.2's reduction primitive would run with its reference kernel")


def supports(call: Any) -> bool | str:
    return too_many_dims(call.shapes) or _broadcast_operand(call) or refusal(lambda: _plans(call))


def kernel(call: Any) -> str:
    return " + ".join(f"{what} {plan.impl}" for what, plan in _plans(call))
