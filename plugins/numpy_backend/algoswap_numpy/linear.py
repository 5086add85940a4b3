"""Reference fully connected layer and its gradients."""

import numpy as np


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """y = x @ w.T + b over any number of leading dimensions of x."""
    y = x @ w.T
    if b is not None:
        y = y + b.astype(y.dtype, copy=False)
    return y


def linear_grad_input(dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Gradient of linear w.r.t. x."""
    return dy @ w


def linear_grad_weight(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Gradient of linear w.r.t. w, summed over all leading dimensions."""
    return dy.reshape(-1, dy.shape[-1]).T @ x.reshape(-1, x.shape[-1])


def linear_grad_bias(dy: np.ndarray) -> np.ndarray:
    """Gradient of linear w.r.t. b, summed over all leading dimensions."""
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)
