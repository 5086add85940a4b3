"""scaled_dot_product_attention and its gradients: cuBLAS batched products (_blas.matmul) around the backend's
softmax (the spec's computation: see algoswap._specs.attention). In float16 and bfloat16 the forward without a
mask (or with is_causal) is cuDNN's fused attention where cuDNN builds it for the call (``_sdpa``: flash
attention reading q, k and v with their strides, registered with layout "any"); else it keeps its products in
the input's dtype (cuBLAS accumulates them in float32) and computes the softmax in float32 (with a mask, the
scaled and masked scores too). The gradients compute in float32, rounded once."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import attention_mask

from . import _passes, _sdpa
from ._blas import matmul, precision
from ._types import accumulation, in_float32
from .reduce import sum_to_shape
from .softmax import softmax, softmax_grad
from ._runtime import dtype_name


def _t(a: Any) -> Any:
    return cp.swapaxes(a, -1, -2)


def _weights(q: Any, k: Any, mask: Any, is_causal: bool, scale: float) -> Any:
    """softmax(scale * q @ k^T + mask) over the keys; rows of scores all -inf give zeros (torch's _safe_softmax).
    With a mask, the scores are scaled, masked and normalised in the accumulation dtype (float32 for the half
    types), the weights rounded once to q's dtype."""
    wide = accumulation(q.dtype)
    added = attention_mask(mask, is_causal, q.shape[-2], k.shape[-2], wide, cp)
    if added is None:
        return _passes.softmax_rows(matmul(q, _t(k)), scale, safe=True)
    scores = matmul(q, _t(k)).astype(wide, copy=False) * wide.type(scale)
    scores += added.astype(wide, copy=False)  # a float mask of a half dtype, widened
    fully_masked = cp.all(scores == -cp.inf, axis=-1, keepdims=True)
    return cp.where(fully_masked, wide.type(0), softmax(scores, axis=-1)).astype(q.dtype, copy=False)


def scaled_dot_product_attention(q: Any, k: Any, v: Any, mask: Any, *, is_causal: bool, scale: float) -> Any:
    if mask is None and dtype_name(q.dtype) in _sdpa.DTYPES:
        out = _sdpa.forward(q, k, v, is_causal, scale)
        if out is not None:
            return out
    return matmul(_weights(q, k, mask, is_causal, scale), v)


def kernel(call: Any) -> str:
    """The forward's kernel: cuDNN's fused attention, or the products around the softmax and why."""
    shapes = (call.shape("query"), call.shape("key"), call.shape("value"))
    scale = call.attrs["scale"] if call.attrs.get("scale") is not None else 1.0 / max(shapes[0][-1], 1) ** 0.5
    why = ("a mask (cuDNN's fused attention is taken without one, or with is_causal)" if call.shape("attn_mask") is not None
           else _sdpa.refusal(call.dtype, shapes, bool(call.attrs.get("is_causal")), scale))
    if not why:
        return _sdpa.label(call.dtype, shapes, bool(call.attrs.get("is_causal")), scale)
    return f"cuBLAS strided-batched GEMM around one softmax kernel, {precision(call.dtype)} (not cuDNN's fused attention: {why})"


def _scores_grad(dy: Any, q: Any, k: Any, v: Any, mask: Any, is_causal: bool, scale: float) -> Any:
    """scale * P * (dP - rowsum(dP * P)), dP = dy @ v^T: the gradient of q @ k^T."""
    return softmax_grad(matmul(dy, _t(v)), _weights(q, k, mask, is_causal, scale), axis=-1) * q.dtype.type(scale)


@in_float32
def scaled_dot_product_attention_grad_query(dy: Any, q: Any, k: Any, v: Any, mask: Any, *, is_causal: bool,
                                            scale: float) -> Any:
    return sum_to_shape(matmul(_scores_grad(dy, q, k, v, mask, is_causal, scale), k), shape=q.shape)


@in_float32
def scaled_dot_product_attention_grad_key(dy: Any, q: Any, k: Any, v: Any, mask: Any, *, is_causal: bool,
                                          scale: float) -> Any:
    return sum_to_shape(matmul(_t(_scores_grad(dy, q, k, v, mask, is_causal, scale)), q), shape=k.shape)


@in_float32
def scaled_dot_product_attention_grad_value(dy: Any, q: Any, k: Any, v: Any, mask: Any, *, is_causal: bool,
                                            scale: float) -> Any:
    return sum_to_shape(matmul(_t(_weights(q, k, mask, is_causal, scale)), dy), shape=v.shape)
