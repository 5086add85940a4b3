"""Reference normalisation kernels: inference batch norm (NCHW, and with an activation after it), training
batch norm with batch statistics (NCHW) and layer norm over trailing dimensions, with the gradients of the
last two."""

import numpy as np

from .conv import activated

Axes = tuple[int, ...]
_BATCH_AXES = (0, 2, 3)


def batchnorm2d(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray,
                weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias, per channel (dimension 1)."""
    return _per_channel_affine(x, running_mean, 1.0 / np.sqrt(running_var + x.dtype.type(eps)), weight, bias)


def batchnorm2d_fused(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray, weight: np.ndarray | None,
                      bias: np.ndarray | None, *, eps: float, activation: str) -> np.ndarray:
    """activation(batchnorm2d(...)): the composition of the two."""
    return activated(batchnorm2d(x, running_mean, running_var, weight, bias, eps=eps), activation)


def _per_channel_affine(x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, weight: np.ndarray | None,
                        bias: np.ndarray | None) -> np.ndarray:
    """(x - mean) * rstd * weight + bias per channel, as PyTorch computes it: x * scale + shift with
    scale = rstd * weight and shift = bias - mean * scale (so that an infinite weight gives NaN
    exactly where PyTorch's batch and instance norms do). mean and rstd: one per channel, or (N, C)."""
    scale = rstd if weight is None else rstd * weight
    shift = -mean * scale if bias is None else bias - mean * scale
    spatial = (slice(None),) * scale.ndim + (None, None)
    return x * scale[spatial] + shift[spatial]


def _statistics(x: np.ndarray, axes: Axes, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The mean over ``axes`` and rstd = 1 / sqrt(biased var + eps) (two-pass variance), axes kept."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=axes, keepdims=True)
    return mean, 1 / np.sqrt(var + x.dtype.type(eps))


def _normalise(x: np.ndarray, axes: Axes, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(x - mean) * rstd over ``axes``, and rstd."""
    mean, rstd = _statistics(x, axes, eps)
    return (x - mean) * rstd, rstd


def _normalise_grad(dxhat: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, axes: Axes) -> np.ndarray:
    """Gradient through the normalisation: rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))."""
    mean_d = np.mean(dxhat, axis=axes, keepdims=True)
    mean_dx = np.mean(dxhat * xhat, axis=axes, keepdims=True)
    return rstd * (dxhat - mean_d - xhat * mean_dx)


def _affine(xhat: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    y = xhat if weight is None else xhat * weight
    return y if bias is None else y + bias


# --------------------------------------------------------------------------- batch_norm_train


def _per_channel_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, eps: float,
                            axes: Axes) -> np.ndarray:
    """Gradient with respect to x of a normalisation over ``axes`` with a per-channel weight (which
    is constant over ``axes``, so it scales the result last, as in PyTorch)."""
    xhat, rstd = _normalise(x, axes, eps)
    grad = _normalise_grad(dy, xhat, rstd, axes)
    return grad if weight is None else grad * weight[:, None, None]


def batch_norm_train(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
                     eps: float) -> np.ndarray:
    """Per-channel normalisation with this batch's mean and biased variance over (N, H, W)."""
    mean, rstd = _statistics(x, _BATCH_AXES, eps)
    return _per_channel_affine(x, mean.reshape(-1), rstd.reshape(-1), weight, bias)


def batch_norm_train_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *,
                                eps: float) -> np.ndarray:
    """Gradient of batch_norm_train with respect to x, through the batch mean and variance."""
    return _per_channel_grad_input(dy, x, weight, eps, _BATCH_AXES)


def batch_norm_train_grad_weight(dy: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    """sum over (N, H, W) of dy * normalised x."""
    xhat, _ = _normalise(x, _BATCH_AXES, eps)
    return np.sum(dy * xhat, axis=_BATCH_AXES)


def batch_norm_train_grad_bias(dy: np.ndarray) -> np.ndarray:
    """sum over (N, H, W) of dy."""
    return np.sum(dy, axis=_BATCH_AXES)


# --------------------------------------------------------------------------------- layer_norm


def _trailing(x: np.ndarray, normalized_ndim: int) -> Axes:
    return tuple(range(x.ndim - normalized_ndim, x.ndim))


def _leading(x: np.ndarray, normalized_ndim: int) -> Axes:
    return tuple(range(x.ndim - normalized_ndim))


def layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
               normalized_ndim: int, eps: float) -> np.ndarray:
    """Normalisation over the last ``normalized_ndim`` dimensions, then weight and bias of their shape."""
    xhat, _ = _normalise(x, _trailing(x, normalized_ndim), eps)
    return _affine(xhat, weight, bias)


def layer_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *,
                          normalized_ndim: int, eps: float) -> np.ndarray:
    """Gradient of layer_norm with respect to x, through the mean and variance."""
    axes = _trailing(x, normalized_ndim)
    xhat, rstd = _normalise(x, axes, eps)
    return _normalise_grad(dy if weight is None else dy * weight, xhat, rstd, axes)


def layer_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, normalized_ndim: int, eps: float) -> np.ndarray:
    """sum over the leading dimensions of dy * normalised x."""
    xhat, _ = _normalise(x, _trailing(x, normalized_ndim), eps)
    return np.sum(dy * xhat, axis=_leading(x, normalized_ndim))


def layer_norm_grad_bias(dy: np.ndarray, *, normalized_ndim: int) -> np.ndarray:
    """sum over the leading dimensions of dy."""
    return np.sum(dy, axis=_leading(dy, normalized_ndim))


# ------------------------------------------------------------------------------ instance_norm

_SPATIAL = (2, 3)


def instance_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """Normalisation of each sample and channel over (H, W), then per-channel weight and bias."""
    mean, rstd = _statistics(x, _SPATIAL, eps)
    return _per_channel_affine(x, mean[:, :, 0, 0], rstd[:, :, 0, 0], weight, bias)


def instance_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, eps: float) -> np.ndarray:
    """Gradient of instance_norm with respect to x, through each sample's mean and variance."""
    return _per_channel_grad_input(dy, x, weight, eps, _SPATIAL)


def instance_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    """sum over (N, H, W) of dy * normalised x."""
    xhat, _ = _normalise(x, _SPATIAL, eps)
    return np.sum(dy * xhat, axis=_BATCH_AXES)


instance_norm_grad_bias = batch_norm_train_grad_bias  # the same sum over (N, H, W)


# --------------------------------------------------------------------------------- group_norm


def _grouped(x: np.ndarray, num_groups: int) -> np.ndarray:
    """(N, C, *spatial) seen as (N, G, C/G * prod(spatial)): each row one sample's group."""
    return x.reshape(x.shape[0], num_groups, -1)


def _group_statistics(x: np.ndarray, num_groups: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The mean and rstd of each (sample, group): (N, G) each."""
    mean, rstd = _statistics(_grouped(x, num_groups), (2,), eps)
    return mean[:, :, 0], rstd[:, :, 0]


def _spread(a: np.ndarray, channels: int) -> np.ndarray:
    """(N, G) values repeated for each channel of their group: (N, C, 1)."""
    return np.repeat(a, channels // a.shape[1], axis=1)[:, :, None]


def _sums(dy: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """dy and x as (N, C, prod(spatial)), and per (sample, channel) sum(dy * x) and sum(dy) over space."""
    dy, x = dy.reshape(x.shape[0], x.shape[1], -1), x.reshape(x.shape[0], x.shape[1], -1)
    return dy, x, np.sum(dy * x, axis=2), np.sum(dy, axis=2)


def group_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, num_groups: int,
               eps: float) -> np.ndarray:
    """Normalisation of each sample's group of channels, then per-channel weight and bias (folded as PyTorch's)."""
    mean, rstd = (_spread(a, x.shape[1]) for a in _group_statistics(x, num_groups, eps))  # (N, C, 1)
    y = _per_channel_affine(x.reshape(x.shape[0], x.shape[1], -1, 1), mean[:, :, 0], rstd[:, :, 0], weight, bias)
    return y.reshape(x.shape)


def group_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, num_groups: int,
                          eps: float) -> np.ndarray:
    """PyTorch's formula (so that NaN and inf land where its do): dx = c1 * dy + c2 * x + c3, c1 = rstd * weight
    per channel, c2 and c3 per (sample, group) from the group's sums of weight * sum(dy * x) and weight * sum(dy)."""
    n, c = x.shape[:2]
    mean, rstd = _group_statistics(x, num_groups, eps)
    dy3, x3, ds, db = _sums(dy, x)
    gamma = np.ones(c, x.dtype) if weight is None else weight
    ds_group, db_group = ((a * gamma).reshape(n, num_groups, -1).sum(axis=2) for a in (ds, db))
    s = x.dtype.type(num_groups * n / x.size)  # 1 / the group's size
    c2 = (db_group * mean - ds_group) * rstd * rstd * rstd * s
    c3 = -c2 * mean - db_group * rstd * s
    c1 = _spread(rstd, c) * gamma[:, None]
    return (c1 * dy3 + _spread(c2, c) * x3 + _spread(c3, c)).reshape(x.shape)


def group_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, num_groups: int, eps: float) -> np.ndarray:
    """PyTorch's formula: sum over N of (sum(dy * x) - sum(dy) * mean) * rstd, each sum over space."""
    mean, rstd = _group_statistics(x, num_groups, eps)
    _, _, ds, db = _sums(dy, x)
    return np.sum((ds - db * _spread(mean, x.shape[1])[:, :, 0]) * _spread(rstd, x.shape[1])[:, :, 0], axis=0)


def group_norm_grad_bias(dy: np.ndarray) -> np.ndarray:
    """sum over all dimensions but the channels (1) of dy."""
    return np.sum(dy, axis=(0, *range(2, dy.ndim)))
