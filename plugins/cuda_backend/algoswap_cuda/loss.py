"""softmax_cross_entropy and binary_cross_entropy with their gradients (CuPy kernels and reductions)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import OpArgumentError

from .indexing import check_indices
from .softmax import log_softmax, softmax


def _reduce(losses: Any, reduction: str) -> Any:
    if reduction == "none":
        return losses
    return (cp.sum if reduction == "sum" else cp.mean)(losses, dtype=losses.dtype)


def _targets(logits: Any, labels: Any) -> Any:
    """Class probabilities (N, C): one-hot rows for integer labels."""
    if labels.ndim == 2:
        return labels
    check_indices("softmax_cross_entropy", "labels", labels, logits.shape[1])
    return cp.eye(logits.shape[1], dtype=logits.dtype)[labels]


def softmax_cross_entropy(logits: Any, labels: Any, *, reduction: str) -> Any:
    losses = -cp.sum(_targets(logits, labels) * log_softmax(logits, axis=1), axis=1)
    return _reduce(losses, reduction)


def softmax_cross_entropy_grad(dy: Any, logits: Any, labels: Any, *, reduction: str) -> Any:
    """(softmax(logits) * sum(targets) - targets) * dy, / N for 'mean'."""
    targets = _targets(logits, labels)
    grad = softmax(logits, axis=1) * cp.sum(targets, axis=1, keepdims=True) - targets
    scale = dy.reshape(-1, 1) if reduction == "none" else dy / (logits.shape[0] if reduction == "mean" else 1)
    return (grad * scale).astype(logits.dtype, copy=False)


_bce = cp.ElementwiseKernel(
    "T x, T t", "T loss", "loss = -(t * max(log(x), (T)-100) + (1 - t) * max(log(1 - x), (T)-100))", "algoswap_bce")
_bce_grad = cp.ElementwiseKernel("T x, T t", "T g", "g = (x - t) / max(x * (1 - x), (T)1e-12)", "algoswap_bce_grad")


def _check_probabilities(op: str, x: Any) -> None:
    """Probabilities are data, so their range is checked when the op runs (NaN included)."""
    if not bool(cp.all((x >= 0) & (x <= 1))):
        low, high = (float(v) for v in cp.stack([cp.nanmin(x), cp.nanmax(x)]).get())
        raise OpArgumentError(op, "input", f"values in [{low:.4g}, {high:.4g}] or NaN",
                              "probabilities in [0, 1] (apply sigmoid first)")


def binary_cross_entropy(x: Any, target: Any, *, reduction: str) -> Any:
    """-(t log(x) + (1 - t) log(1 - x)), each log clamped at -100."""
    _check_probabilities("binary_cross_entropy", x)
    return _reduce(_bce(x, target), reduction)


def binary_cross_entropy_grad(dy: Any, x: Any, target: Any, *, reduction: str) -> Any:
    _check_probabilities("binary_cross_entropy_grad", x)
    scale = dy / x.size if reduction == "mean" else dy
    return (_bce_grad(x, target) * scale).astype(x.dtype, copy=False)
