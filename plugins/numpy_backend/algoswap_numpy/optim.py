"""Reference optimizer updates, dense and lazy-sparse, in place (they return param).

The sparse forms gather the named rows (repeats added up), run the dense rule on them, and scatter
the rows back: exactly the spec's lazy semantics.
"""

from typing import Callable

import numpy as np

from .indexing import check_indices


def sgd_update(param: np.ndarray, grad: np.ndarray, *, lr: float) -> np.ndarray:
    param -= param.dtype.type(lr) * grad
    return param


def momentum_update(param: np.ndarray, grad: np.ndarray, velocity: np.ndarray, *, lr: float, momentum: float) -> np.ndarray:
    velocity *= velocity.dtype.type(momentum)
    velocity += grad
    param -= param.dtype.type(lr) * velocity
    return param


def nesterov_update(param: np.ndarray, grad: np.ndarray, velocity: np.ndarray, *, lr: float, momentum: float) -> np.ndarray:
    velocity *= velocity.dtype.type(momentum)
    velocity += grad
    param -= param.dtype.type(lr) * (grad + param.dtype.type(momentum) * velocity)
    return param


def adagrad_update(param: np.ndarray, grad: np.ndarray, accumulator: np.ndarray, *, lr: float, eps: float) -> np.ndarray:
    accumulator += grad * grad
    param -= param.dtype.type(lr) * grad / (np.sqrt(accumulator) + param.dtype.type(eps))
    return param


def adam_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, *, lr: float, beta1: float,
                beta2: float, eps: float, step: int) -> np.ndarray:
    t = param.dtype.type
    m *= t(beta1)
    m += t(1 - beta1) * grad
    v *= t(beta2)
    v += t(1 - beta2) * grad * grad
    denominator = np.sqrt(v / t(1 - beta2**step)) + t(eps)
    param -= t(lr / (1 - beta1**step)) * m / denominator
    return param


def _gather(op: str, param: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows named and their summed gradient rows."""
    check_indices(op, "indices", indices, param.shape[0])
    named, inverse = np.unique(indices.reshape(-1), return_inverse=True)
    summed = np.zeros((named.size,) + param.shape[1:], dtype=rows.dtype)
    np.add.at(summed, inverse.reshape(-1), rows.reshape((-1,) + param.shape[1:]))
    return named, summed


def _sparse(op: str, dense: Callable[..., np.ndarray], param: np.ndarray, indices: np.ndarray, rows: np.ndarray,
            *state: np.ndarray, **attrs: object) -> np.ndarray:
    named, grad = _gather(op, param, indices, rows)
    picked = [param[named]] + [s[named] for s in state]
    dense(picked[0], grad, *picked[1:], **attrs)
    for target, values in zip((param,) + state, picked):
        target[named] = values
    return param


def sgd_update_sparse(param: np.ndarray, indices: np.ndarray, rows: np.ndarray, *, lr: float) -> np.ndarray:
    return _sparse("sgd_update_sparse", sgd_update, param, indices, rows, lr=lr)


def momentum_update_sparse(param: np.ndarray, indices: np.ndarray, rows: np.ndarray, velocity: np.ndarray, *,
                           lr: float, momentum: float) -> np.ndarray:
    return _sparse("momentum_update_sparse", momentum_update, param, indices, rows, velocity, lr=lr, momentum=momentum)


def nesterov_update_sparse(param: np.ndarray, indices: np.ndarray, rows: np.ndarray, velocity: np.ndarray, *,
                           lr: float, momentum: float) -> np.ndarray:
    return _sparse("nesterov_update_sparse", nesterov_update, param, indices, rows, velocity, lr=lr, momentum=momentum)


def adagrad_update_sparse(param: np.ndarray, indices: np.ndarray, rows: np.ndarray, accumulator: np.ndarray, *,
                          lr: float, eps: float) -> np.ndarray:
    return _sparse("adagrad_update_sparse", adagrad_update, param, indices, rows, accumulator, lr=lr, eps=eps)


def adam_update_sparse(param: np.ndarray, indices: np.ndarray, rows: np.ndarray, m: np.ndarray, v: np.ndarray, *,
                       lr: float, beta1: float, beta2: float, eps: float, step: int) -> np.ndarray:
    return _sparse("adam_update_sparse", adam_update, param, indices, rows, m, v, lr=lr, beta1=beta1, beta2=beta2,
                   eps=eps, step=step)
