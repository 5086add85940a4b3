"""softmax_cross_entropy and binary_cross_entropy with their gradients (CuPy kernels and reductions; float16
and bfloat16 computed in float32, rounded once: ``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import OpArgumentError

from ._types import in_float32
from .indexing import check_indices
from .softmax import log_softmax, softmax


def _reduce(losses: Any, reduction: str) -> Any:
    if reduction == "none":
        return losses
    return (cp.sum if reduction == "sum" else cp.mean)(losses, dtype=losses.dtype)


def _weighted_targets(logits: Any, labels: Any, scale: Any) -> Any:
    """targets * scale (N, C): for integer labels, scale at each row's label and exactly 0 elsewhere
    (the other classes take no part, as in PyTorch's nll_loss: a non-finite scale stays there)."""
    if labels.ndim == 2:
        return labels * scale
    check_indices("softmax_cross_entropy", "labels", labels, logits.shape[1])
    weighted = cp.zeros_like(logits)
    weighted[cp.arange(len(labels)), labels] = cp.broadcast_to(scale, (len(labels), 1))[:, 0]
    return weighted


def _target_log_probability(log_p: Any, labels: Any) -> Any:
    """sum(targets * log_p) per sample; for integer labels, the label's entry alone (the other
    classes take no part, as in PyTorch: a -inf beside the label stays out)."""
    if labels.ndim == 2:
        return cp.sum(labels * log_p, axis=1)
    check_indices("softmax_cross_entropy", "labels", labels, log_p.shape[1])
    return log_p[cp.arange(len(labels)), labels]


@in_float32
def softmax_cross_entropy(logits: Any, labels: Any, *, reduction: str) -> Any:
    return _reduce(-_target_log_probability(log_softmax(logits, axis=1), labels), reduction)


@in_float32
def softmax_cross_entropy_grad(dy: Any, logits: Any, labels: Any, *, reduction: str) -> Any:
    """softmax(logits) * sum(g) - g with g = targets * dy (/ N for 'mean'): log_softmax's gradient of
    the loss's, in PyTorch's order."""
    scale = dy.reshape(-1, 1) if reduction == "none" else dy / (logits.shape[0] if reduction == "mean" else 1)
    g = _weighted_targets(logits, labels, scale)
    return (softmax(logits, axis=1) * cp.sum(g, axis=1, keepdims=True) - g).astype(logits.dtype, copy=False)


_bce = cp.ElementwiseKernel(
    "T x, T t", "T loss", "loss = -(t * max(log(x), (T)-100) + (1 - t) * max(log(1 - x), (T)-100))", "algoswap_bce")
_bce_grad = cp.ElementwiseKernel("T x, T t", "T g", "g = (x - t) / max(x * (1 - x), (T)1e-12)", "algoswap_bce_grad")


def _check_probabilities(op: str, x: Any, target: Any) -> None:
    """Probabilities are data, so their range is checked when the op runs (NaN included), for the
    input and, as PyTorch checks it, the target."""
    valid = [cp.all((values >= 0) & (values <= 1)) for values in (x, target)]
    if bool(valid[0] & valid[1]):  # one device-to-host read when both are
        return
    for name, values, hint, ok in (("input", x, " (apply sigmoid first)", valid[0]), ("target", target, "", valid[1])):
        if not bool(ok):
            raise OpArgumentError(op, name, _seen(values), f"probabilities in [0, 1]{hint}")


def _seen(values: Any) -> str:
    """What the values are, in words: their range, or NaN."""
    if bool(cp.isnan(values).all()):
        return "NaN"
    low, high = (float(v) for v in cp.stack([cp.nanmin(values), cp.nanmax(values)]).get())
    return f"values in [{low:.4g}, {high:.4g}] or NaN"


@in_float32
def binary_cross_entropy(x: Any, target: Any, *, reduction: str) -> Any:
    """-(t log(x) + (1 - t) log(1 - x)), each log clamped at -100."""
    _check_probabilities("binary_cross_entropy", x, target)
    return _reduce(_bce(x, target), reduction)


@in_float32
def binary_cross_entropy_grad(dy: Any, x: Any, target: Any, *, reduction: str) -> Any:
    _check_probabilities("binary_cross_entropy_grad", x, target)
    scale = dy / x.size if reduction == "mean" else dy
    return (_bce_grad(x, target) * scale).astype(x.dtype, copy=False)
