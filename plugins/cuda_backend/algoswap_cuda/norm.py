"""Batch norm (inference and training), layer, instance and group norm with gradients, as CuPy reductions in the
input's dtype (two-pass variance); the inference batch norm (with its activation too: batchnorm2d_fused)
and the layer norm as one kernel launch each (``_passes``, every float dtype: float16 and bfloat16 computed
in float32). The rest computes float16 and bfloat16 in float32, rounded once (``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from . import _passes
from ._types import in_float32
from .reduce import total

_NHW = (0, 2, 3)


def _per_channel(v: Any) -> Any:
    return None if v is None else v.reshape(1, -1, 1, 1)


def batchnorm2d(x: Any, running_mean: Any, running_var: Any, weight: Any, bias: Any, *, eps: float) -> Any:
    return _passes.batchnorm(x, running_mean, running_var, weight, bias, eps)


def batchnorm2d_fused(x: Any, running_mean: Any, running_var: Any, weight: Any, bias: Any, *, eps: float,
                      activation: str) -> Any:
    """activation(batchnorm2d(...)) in one pass over memory: the batch norm kernel with the activation
    (the convolution epilogue's C statements) before its store."""
    return _passes.batchnorm(x, running_mean, running_var, weight, bias, eps, activation)


def _per_channel_affine(x: Any, mean: Any, rstd: Any, weight: Any, bias: Any) -> Any:
    """(x - mean) * rstd * weight + bias per channel, as PyTorch computes it: x * scale + shift with
    scale = rstd * weight and shift = bias - mean * scale (so that an infinite weight gives NaN
    exactly where PyTorch's batch and instance norms do). mean and rstd: (1, C, 1, 1) or (N, C, 1, 1)."""
    scale = rstd if weight is None else rstd * _per_channel(weight)
    shift = -mean * scale if bias is None else _per_channel(bias) - mean * scale
    return x * scale + shift


def _moments(x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any, Any]:
    """The mean over ``axes``, x - mean, and rstd = 1 / sqrt(biased var + eps), axes kept."""
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    return mean, centred, 1 / cp.sqrt((centred * centred).mean(axis=axes, keepdims=True) + x.dtype.type(eps))


def _standardise(x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any]:
    _, centred, rstd = _moments(x, axes, eps)
    return centred * rstd, rstd


def _standardise_grad(d: Any, xhat: Any, rstd: Any, axes: tuple[int, ...]) -> Any:
    return rstd * (d - d.mean(axis=axes, keepdims=True) - xhat * (d * xhat).mean(axis=axes, keepdims=True))


def _per_channel_family(axes: tuple[int, ...], name: str) -> tuple[Any, Any, Any]:
    """Forward, input gradient and weight gradient of a norm standardising over ``axes`` with a
    per-channel weight and bias (batch norm: (N, H, W); instance norm: (H, W))."""
    def forward(x: Any, weight: Any, bias: Any, *, eps: float) -> Any:
        mean, _, rstd = _moments(x, axes, eps)
        return _per_channel_affine(x, mean, rstd, weight, bias)

    def grad_input(dy: Any, x: Any, weight: Any, *, eps: float) -> Any:
        """The weight is constant over ``axes``, so it scales the result last, as in PyTorch."""
        grad = _standardise_grad(dy, *_standardise(x, axes, eps), axes)
        return grad if weight is None else grad * _per_channel(weight)

    def grad_weight(dy: Any, x: Any, *, eps: float) -> Any:
        return (dy * _standardise(x, axes, eps)[0]).sum(axis=_NHW)

    for function, suffix in ((forward, ""), (grad_input, "_grad_input"), (grad_weight, "_grad_weight")):
        function.__name__ = function.__qualname__ = name + suffix
    return in_float32(forward), in_float32(grad_input), in_float32(grad_weight)


batch_norm_train, batch_norm_train_grad_input, batch_norm_train_grad_weight = _per_channel_family(_NHW, "batch_norm_train")


def batch_norm_train_grad_bias(dy: Any) -> Any:
    return total(dy, _NHW)


def _last(x: Any, ndim: int) -> tuple[int, ...]:
    return tuple(range(x.ndim - ndim, x.ndim))


def _first(x: Any, ndim: int) -> tuple[int, ...]:
    return tuple(range(x.ndim - ndim))


def layer_norm(x: Any, weight: Any, bias: Any, *, normalized_ndim: int, eps: float) -> Any:
    return _passes.layer_norm(x, weight, bias, normalized_ndim, eps)


@in_float32
def layer_norm_grad_input(dy: Any, x: Any, weight: Any, *, normalized_ndim: int, eps: float) -> Any:
    axes = _last(x, normalized_ndim)
    xhat, rstd = _standardise(x, axes, eps)
    return _standardise_grad(dy if weight is None else dy * weight, xhat, rstd, axes)


@in_float32
def layer_norm_grad_weight(dy: Any, x: Any, *, normalized_ndim: int, eps: float) -> Any:
    return (dy * _standardise(x, _last(x, normalized_ndim), eps)[0]).sum(axis=_first(x, normalized_ndim))


def layer_norm_grad_bias(dy: Any, *, normalized_ndim: int) -> Any:
    return total(dy, _first(dy, normalized_ndim))


instance_norm, instance_norm_grad_input, instance_norm_grad_weight = _per_channel_family((2, 3), "instance_norm")
instance_norm_grad_bias = batch_norm_train_grad_bias  # the same sum over (N, H, W)


def _grouped(x: Any, num_groups: int) -> Any:
    """(N, C, *spatial) seen as (N, G, C/G * prod(spatial)): each row one sample's group."""
    return x.reshape(x.shape[0], num_groups, -1)


@in_float32
def group_norm(x: Any, weight: Any, bias: Any, *, num_groups: int, eps: float) -> Any:
    """The statistics per (sample, group), spread over the group's channels, then PyTorch's folded affine."""
    n, c = x.shape[:2]
    mean, _, rstd = _moments(_grouped(x, num_groups), (2,), eps)  # (N, G, 1)
    mean, rstd = (cp.repeat(a, c // num_groups, axis=1)[..., None] for a in (mean, rstd))  # (N, C, 1, 1)
    return _per_channel_affine(x.reshape(n, c, -1, 1), mean, rstd, weight, bias).reshape(x.shape)


def _group_sums(dy: Any, x: Any, num_groups: int, eps: float) -> tuple[Any, ...]:
    """Per (sample, group) mean and rstd, (N, G); dy and x as (N, C, prod(spatial)); per (sample, channel) sum(dy * x)
    and sum(dy) over space."""
    n, c = x.shape[:2]
    mean, _, rstd = _moments(_grouped(x, num_groups), (2,), eps)
    dy3, x3 = dy.reshape(n, c, -1), x.reshape(n, c, -1)
    return mean[:, :, 0], rstd[:, :, 0], dy3, x3, (dy3 * x3).sum(axis=2), dy3.sum(axis=2)


def _spread(a: Any, channels: int) -> Any:
    """(N, G) values repeated for each channel of their group: (N, C, 1)."""
    return cp.repeat(a, channels // a.shape[1], axis=1)[:, :, None]


@in_float32
def group_norm_grad_input(dy: Any, x: Any, weight: Any, *, num_groups: int, eps: float) -> Any:
    """PyTorch's formula, as the NumPy reference (NaN and inf land where torch's do): c1 * dy + c2 * x + c3."""
    n, c = x.shape[:2]
    mean, rstd, dy3, x3, ds, db = _group_sums(dy, x, num_groups, eps)
    gamma = cp.ones(c, x.dtype) if weight is None else weight
    ds_group, db_group = ((a * gamma).reshape(n, num_groups, -1).sum(axis=2) for a in (ds, db))
    s = x.dtype.type(num_groups * n / x.size)  # 1 / the group's size
    c2 = (db_group * mean - ds_group) * rstd * rstd * rstd * s
    c3 = -c2 * mean - db_group * rstd * s
    return (_spread(rstd, c) * gamma[:, None] * dy3 + _spread(c2, c) * x3 + _spread(c3, c)).reshape(x.shape)


@in_float32
def group_norm_grad_weight(dy: Any, x: Any, *, num_groups: int, eps: float) -> Any:
    """PyTorch's formula: the sum over N of (sum(dy * x) - sum(dy) * mean) * rstd, each sum over space."""
    mean, rstd, _, _, ds, db = _group_sums(dy, x, num_groups, eps)
    c = x.shape[1]
    return ((ds - db * _spread(mean, c)[:, :, 0]) * _spread(rstd, c)[:, :, 0]).sum(axis=0)


def group_norm_grad_bias(dy: Any) -> Any:
    return total(dy, (0, *range(2, dy.ndim)))
