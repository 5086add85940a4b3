"""Reference scaled dot-product attention and its gradients (torch's math path: see algoswap._specs.attention)."""

from __future__ import annotations

import numpy as np

from algoswap import attention_mask

from .reduce import sum_to_shape


def _t(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def attention_weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, is_causal: bool, scale: float) -> np.ndarray:
    """softmax(scale * q @ k^T + mask) over the keys; rows of scores all -inf give zeros (torch's _safe_softmax)."""
    scores = (q @ _t(k)) * q.dtype.type(scale)
    added = attention_mask(mask, is_causal, q.shape[-2], k.shape[-2], q.dtype, np)
    if added is not None:
        scores = scores + added
    with np.errstate(invalid="ignore"):  # rows of NaN, +inf or only -inf
        e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
        weights = e / np.sum(e, axis=-1, keepdims=True)
    return np.where(np.all(scores == -np.inf, axis=-1, keepdims=True), q.dtype.type(0), weights)


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *, is_causal: bool,
                                 scale: float) -> np.ndarray:
    return np.ascontiguousarray(attention_weights(q, k, mask, is_causal, scale) @ v)


def _scores_grad(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, is_causal: bool,
                 scale: float) -> np.ndarray:
    """The gradient of the scaled scores' sum (q @ k^T, before the scale): scale * P * (dP - rowsum(dP * P)), dP = dy @ v^T."""
    weights = attention_weights(q, k, mask, is_causal, scale)
    d_weights = dy @ _t(v)
    return q.dtype.type(scale) * (weights * (d_weights - np.sum(d_weights * weights, axis=-1, keepdims=True)))


def scaled_dot_product_attention_grad_query(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                            mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    return sum_to_shape(_scores_grad(dy, q, k, v, mask, is_causal, scale) @ k, shape=q.shape)


def scaled_dot_product_attention_grad_key(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                          mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    return sum_to_shape(_t(_scores_grad(dy, q, k, v, mask, is_causal, scale)) @ q, shape=k.shape)


def scaled_dot_product_attention_grad_value(dy: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                            mask: np.ndarray | None, *, is_causal: bool, scale: float) -> np.ndarray:
    return sum_to_shape(_t(attention_weights(q, k, mask, is_causal, scale)) @ dy, shape=v.shape)
