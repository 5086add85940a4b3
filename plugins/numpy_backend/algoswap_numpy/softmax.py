"""Reference softmax and log_softmax along one axis, and their gradients."""

import numpy as np


def softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along axis: no exp overflows."""
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """x - logsumexp(x) along axis, with logsumexp = max + log(sum(exp(x - max)))."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax_grad(dy: np.ndarray, y: np.ndarray, *, axis: int) -> np.ndarray:
    """Gradient of softmax from its output y: y * (dy - sum(dy * y, axis))."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def log_softmax_grad(dy: np.ndarray, y: np.ndarray, *, axis: int) -> np.ndarray:
    """Gradient of log_softmax from its output y: dy - exp(y) * sum(dy, axis)."""
    return dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)
