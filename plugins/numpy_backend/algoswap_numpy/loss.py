"""Reference softmax_cross_entropy and binary_cross_entropy with their gradients."""

import numpy as np
from algoswap import OpArgumentError

from .indexing import check_indices
from .softmax import log_softmax, softmax


def _reduce(losses: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        return losses
    total = np.sum(losses) if reduction == "sum" else np.mean(losses)
    return np.asarray(total, dtype=losses.dtype)


def _targets(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Class probabilities (N, C): one-hot rows for integer labels."""
    if labels.ndim == 2:
        return labels
    check_indices("softmax_cross_entropy", "labels", labels, logits.shape[1])
    return np.eye(logits.shape[1], dtype=logits.dtype)[labels]


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, *, reduction: str) -> np.ndarray:
    """-sum(targets * log_softmax(logits)) per sample, then the reduction."""
    losses = -np.sum(_targets(logits, labels) * log_softmax(logits, axis=1), axis=1)
    return _reduce(losses, reduction)


def softmax_cross_entropy_grad(dy: np.ndarray, logits: np.ndarray, labels: np.ndarray, *, reduction: str) -> np.ndarray:
    """(softmax(logits) * sum(targets) - targets) * dy, / N for 'mean' (sum(targets) is 1 for distributions)."""
    targets = _targets(logits, labels)
    grad = softmax(logits, axis=1) * np.sum(targets, axis=1, keepdims=True) - targets
    scale = dy.reshape(-1, 1) if reduction == "none" else dy / (logits.shape[0] if reduction == "mean" else 1)
    return (grad * scale).astype(logits.dtype, copy=False)


def _clamped_log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(x), x.dtype.type(-100))


def _check_probabilities(op: str, x: np.ndarray) -> None:
    """Probabilities are data, so their range is checked when the op runs (NaN included)."""
    if not np.all((x >= 0) & (x <= 1)):
        raise OpArgumentError(op, "input", f"values in [{np.nanmin(x):.4g}, {np.nanmax(x):.4g}] or NaN", "probabilities in [0, 1] (apply sigmoid first)")


def binary_cross_entropy(x: np.ndarray, target: np.ndarray, *, reduction: str) -> np.ndarray:
    """-(t log(x) + (1 - t) log(1 - x)), each log clamped at -100."""
    _check_probabilities("binary_cross_entropy", x)
    losses = -(target * _clamped_log(x) + (1 - target) * _clamped_log(1 - x))
    return _reduce(losses, reduction)


def binary_cross_entropy_grad(dy: np.ndarray, x: np.ndarray, target: np.ndarray, *, reduction: str) -> np.ndarray:
    """dy * (x - t) / max(x (1 - x), 1e-12), / size for 'mean'."""
    _check_probabilities("binary_cross_entropy_grad", x)
    grad = (x - target) / np.maximum(x * (1 - x), x.dtype.type(1e-12))
    scale = dy / x.size if reduction == "mean" else dy
    return (grad * scale).astype(x.dtype, copy=False)
