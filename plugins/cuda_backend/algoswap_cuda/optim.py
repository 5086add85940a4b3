"""Optimizer updates in place, each one CUDA kernel over the parameter and its state (dense), or over
the named rows (lazy-sparse: distinct rows gathered with their summed gradient rows, updated by the
same kernel, scattered back), as the spec defines them. float16 and bfloat16 parameters and state are
updated in float32 and rounded once (``_types.in_float32``, which writes them back in place)."""

from __future__ import annotations

from typing import Any, Callable

import cupy as cp

from ._types import in_float32
from .indexing import check_indices

_sgd = cp.ElementwiseKernel("T g, T lr", "T p", "p -= lr * g", "algoswap_sgd")
_momentum = cp.ElementwiseKernel("T g, T lr, T mu", "T p, T v", "v = v * mu + g; p -= lr * v", "algoswap_momentum")
_nesterov = cp.ElementwiseKernel("T g, T lr, T mu", "T p, T v", "v = v * mu + g; p -= lr * (g + mu * v)",
                                 "algoswap_nesterov")
_adagrad = cp.ElementwiseKernel("T g, T lr, T eps", "T p, T a", "a += g * g; p -= lr * g / (sqrt(a) + eps)",
                                "algoswap_adagrad")
_adam = cp.ElementwiseKernel(
    "T g, T b1, T b2, T step_size, T correction2, T eps", "T p, T m, T v",
    "m = m * b1 + (1 - b1) * g; v = v * b2 + (1 - b2) * g * g; p -= step_size * m / (sqrt(v / correction2) + eps)",
    "algoswap_adam")


@in_float32(updated=(0,))
def sgd_update(param: Any, grad: Any, *, lr: float) -> Any:
    _sgd(grad, param.dtype.type(lr), param)
    return param


@in_float32(updated=(0, 2))
def momentum_update(param: Any, grad: Any, velocity: Any, *, lr: float, momentum: float) -> Any:
    t = param.dtype.type
    _momentum(grad, t(lr), t(momentum), param, velocity)
    return param


@in_float32(updated=(0, 2))
def nesterov_update(param: Any, grad: Any, velocity: Any, *, lr: float, momentum: float) -> Any:
    t = param.dtype.type
    _nesterov(grad, t(lr), t(momentum), param, velocity)
    return param


@in_float32(updated=(0, 2))
def adagrad_update(param: Any, grad: Any, accumulator: Any, *, lr: float, eps: float) -> Any:
    t = param.dtype.type
    _adagrad(grad, t(lr), t(eps), param, accumulator)
    return param


@in_float32(updated=(0, 2, 3))
def adam_update(param: Any, grad: Any, m: Any, v: Any, *, lr: float, beta1: float, beta2: float, eps: float,
                step: int) -> Any:
    t = param.dtype.type
    _adam(grad, t(beta1), t(beta2), t(lr / (1 - beta1**step)), t(1 - beta2**step), t(eps), param, m, v)
    return param


def _sparse(op: str, dense: Callable[..., Any], param: Any, indices: Any, rows: Any, *state: Any, **attrs: Any) -> Any:
    check_indices(op, "indices", indices, param.shape[0])
    named, inverse = cp.unique(indices.reshape(-1), return_inverse=True)
    grad = cp.zeros((named.size,) + param.shape[1:], dtype=rows.dtype)
    cp.add.at(grad, inverse.reshape(-1), rows.reshape((-1,) + param.shape[1:]))
    picked = [param[named]] + [s[named] for s in state]
    dense(picked[0], grad, *picked[1:], **attrs)
    for target, values in zip((param,) + state, picked):
        target[named] = values
    return param


@in_float32(updated=(0,))
def sgd_update_sparse(param: Any, indices: Any, rows: Any, *, lr: float) -> Any:
    return _sparse("sgd_update_sparse", sgd_update, param, indices, rows, lr=lr)


@in_float32(updated=(0, 3))
def momentum_update_sparse(param: Any, indices: Any, rows: Any, velocity: Any, *, lr: float, momentum: float) -> Any:
    return _sparse("momentum_update_sparse", momentum_update, param, indices, rows, velocity, lr=lr, momentum=momentum)


@in_float32(updated=(0, 3))
def nesterov_update_sparse(param: Any, indices: Any, rows: Any, velocity: Any, *, lr: float, momentum: float) -> Any:
    return _sparse("nesterov_update_sparse", nesterov_update, param, indices, rows, velocity, lr=lr, momentum=momentum)


@in_float32(updated=(0, 3))
def adagrad_update_sparse(param: Any, indices: Any, rows: Any, accumulator: Any, *, lr: float, eps: float) -> Any:
    return _sparse("adagrad_update_sparse", adagrad_update, param, indices, rows, accumulator, lr=lr, eps=eps)


@in_float32(updated=(0, 3, 4))
def adam_update_sparse(param: Any, indices: Any, rows: Any, m: Any, v: Any, *, lr: float, beta1: float, beta2: float,
                       eps: float, step: int) -> Any:
    return _sparse("adam_update_sparse", adam_update, param, indices, rows, m, v, lr=lr, beta1=beta1, beta2=beta2,
                   eps=eps, step=step)
