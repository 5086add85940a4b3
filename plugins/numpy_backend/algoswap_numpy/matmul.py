"""Reference matmul and batch_matmul (optional transposes, broadcast batch dimensions) and gradients."""

import numpy as np

from .reduce import sum_to_shape


def _op(x: np.ndarray, transposed: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if transposed else x


def matmul(a: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(a) @ op(b)."""
    return np.matmul(_op(a, trans_a), _op(b, trans_b))


def _grad_a(dy: np.ndarray, b: np.ndarray, trans_a: bool, trans_b: bool) -> np.ndarray:
    """d op(a) = dy @ op(b)^T; transposed back when trans_a."""
    grad = np.matmul(dy, np.swapaxes(_op(b, trans_b), -1, -2))
    return _op(grad, trans_a)


def _grad_b(dy: np.ndarray, a: np.ndarray, trans_a: bool, trans_b: bool) -> np.ndarray:
    """d op(b) = op(a)^T @ dy; transposed back when trans_b."""
    grad = np.matmul(np.swapaxes(_op(a, trans_a), -1, -2), dy)
    return _op(grad, trans_b)


def matmul_grad_a(dy: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return np.ascontiguousarray(_grad_a(dy, b, trans_a, trans_b))


def matmul_grad_b(dy: np.ndarray, a: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return np.ascontiguousarray(_grad_b(dy, a, trans_a, trans_b))


def batch_matmul(a: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool) -> np.ndarray:
    return np.matmul(_op(a, trans_a), _op(b, trans_b))


def batch_matmul_grad_a(dy: np.ndarray, b: np.ndarray, *, trans_a: bool, trans_b: bool,
                        a_size: tuple[int, ...]) -> np.ndarray:
    """The gradient of a, summed over the batch dimensions that broadcasting a added or stretched."""
    return sum_to_shape(_grad_a(dy, b, trans_a, trans_b), shape=a_size)


def batch_matmul_grad_b(dy: np.ndarray, a: np.ndarray, *, trans_a: bool, trans_b: bool,
                        b_size: tuple[int, ...]) -> np.ndarray:
    return sum_to_shape(_grad_b(dy, a, trans_a, trans_b), shape=b_size)
