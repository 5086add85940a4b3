"""Reference softmax_cross_entropy and binary_cross_entropy with their gradients."""

from typing import Any

import numpy as np
from algoswap import OpArgumentError

from .indexing import check_indices
from .softmax import log_softmax, softmax


def _reduce(losses: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        return losses
    total = np.sum(losses) if reduction == "sum" else np.mean(losses)
    return np.asarray(total, dtype=losses.dtype)


def _weighted_targets(logits: np.ndarray, labels: np.ndarray, scale: Any) -> np.ndarray:
    """targets * scale (N, C): for integer labels, scale at each row's label and exactly 0 elsewhere
    (the other classes take no part, as in PyTorch's nll_loss: a non-finite scale stays there)."""
    if labels.ndim == 2:
        return labels * scale
    check_indices("softmax_cross_entropy", "labels", labels, logits.shape[1])
    weighted = np.zeros_like(logits)
    weighted[np.arange(len(labels)), labels] = np.broadcast_to(scale, (len(labels), 1))[:, 0]
    return weighted


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, *, reduction: str) -> np.ndarray:
    """-sum(targets * log_softmax(logits)) per sample (for integer labels, the label's log_softmax
    alone), then the reduction."""
    log_p = log_softmax(logits, axis=1)
    if labels.ndim == 2:
        losses = -np.sum(labels * log_p, axis=1)
    else:
        check_indices("softmax_cross_entropy", "labels", labels, logits.shape[1])
        losses = -np.take_along_axis(log_p, labels[:, None], axis=1)[:, 0]
    return _reduce(losses, reduction)


def softmax_cross_entropy_grad(dy: np.ndarray, logits: np.ndarray, labels: np.ndarray, *, reduction: str) -> np.ndarray:
    """softmax(logits) * sum(g) - g with g = targets * dy (/ N for 'mean'): log_softmax's gradient of
    the loss's, in PyTorch's order (sum(targets) is 1 for distributions)."""
    scale = dy.reshape(-1, 1) if reduction == "none" else dy / (logits.shape[0] if reduction == "mean" else 1)
    g = _weighted_targets(logits, labels, scale)
    return (softmax(logits, axis=1) * np.sum(g, axis=1, keepdims=True) - g).astype(logits.dtype, copy=False)


def _clamped_log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(x), x.dtype.type(-100))


def _check_probabilities(op: str, x: np.ndarray, target: np.ndarray) -> None:
    """Probabilities are data, so their range is checked when the op runs (NaN included), for the
    input and, as PyTorch checks it, the target."""
    for name, values, hint in (("input", x, " (apply sigmoid first)"), ("target", target, "")):
        if not np.all((values >= 0) & (values <= 1)):
            given = "NaN" if np.isnan(values).all() else f"values in [{np.nanmin(values):.4g}, {np.nanmax(values):.4g}] or NaN"
            raise OpArgumentError(op, name, given, f"probabilities in [0, 1]{hint}")


def binary_cross_entropy(x: np.ndarray, target: np.ndarray, *, reduction: str) -> np.ndarray:
    """-(t log(x) + (1 - t) log(1 - x)), each log clamped at -100."""
    _check_probabilities("binary_cross_entropy", x, target)
    losses = -(target * _clamped_log(x) + (1 - target) * _clamped_log(1 - x))
    return _reduce(losses, reduction)


def binary_cross_entropy_grad(dy: np.ndarray, x: np.ndarray, target: np.ndarray, *, reduction: str) -> np.ndarray:
    """dy * (x - t) / max(x (1 - x), 1e-12), / size for 'mean'."""
    _check_probabilities("binary_cross_entropy_grad", x, target)
    grad = (x - target) / np.maximum(x * (1 - x), x.dtype.type(1e-12))
    scale = dy / x.size if reduction == "mean" else dy
    return (grad * scale).astype(x.dtype, copy=False)
