"""Reference normalisation kernels: inference batch norm (NCHW), training batch norm with batch
statistics (NCHW) and layer norm over trailing dimensions, with the gradients of the last two."""

import numpy as np

Axes = tuple[int, ...]
_BATCH_AXES = (0, 2, 3)


def batchnorm2d(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray,
                weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias, per channel (dimension 1)."""
    scale = 1.0 / np.sqrt(running_var + x.dtype.type(eps))
    if weight is not None:
        scale = scale * weight
    y = (x - running_mean[:, None, None]) * scale[:, None, None]
    if bias is not None:
        y += bias[:, None, None]
    return y


def _normalise(x: np.ndarray, axes: Axes, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(x - mean) * rstd over ``axes`` and rstd = 1 / sqrt(biased var + eps) (two-pass variance)."""
    centred = x - np.mean(x, axis=axes, keepdims=True)
    var = np.mean(centred * centred, axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(var + x.dtype.type(eps))
    return centred * rstd, rstd


def _normalise_grad(dxhat: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, axes: Axes) -> np.ndarray:
    """Gradient through the normalisation: rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))."""
    mean_d = np.mean(dxhat, axis=axes, keepdims=True)
    mean_dx = np.mean(dxhat * xhat, axis=axes, keepdims=True)
    return rstd * (dxhat - mean_d - xhat * mean_dx)


def _affine(xhat: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    y = xhat if weight is None else xhat * weight
    return y if bias is None else y + bias


# --------------------------------------------------------------------------- batch_norm_train


def _channel(v: np.ndarray | None) -> np.ndarray | None:
    return None if v is None else v[:, None, None]


def _per_channel_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, eps: float,
                            axes: Axes) -> np.ndarray:
    """Gradient with respect to x of a normalisation over ``axes`` with a per-channel weight."""
    xhat, rstd = _normalise(x, axes, eps)
    dxhat = dy if weight is None else dy * weight[:, None, None]
    return _normalise_grad(dxhat, xhat, rstd, axes)


def batch_norm_train(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *,
                     eps: float) -> np.ndarray:
    """Per-channel normalisation with this batch's mean and biased variance over (N, H, W)."""
    xhat, _ = _normalise(x, _BATCH_AXES, eps)
    return _affine(xhat, _channel(weight), _channel(bias))


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
    xhat, _ = _normalise(x, _SPATIAL, eps)
    return _affine(xhat, _channel(weight), _channel(bias))


def instance_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, eps: float) -> np.ndarray:
    """Gradient of instance_norm with respect to x, through each sample's mean and variance."""
    return _per_channel_grad_input(dy, x, weight, eps, _SPATIAL)


def instance_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    """sum over (N, H, W) of dy * normalised x."""
    xhat, _ = _normalise(x, _SPATIAL, eps)
    return np.sum(dy * xhat, axis=_BATCH_AXES)


instance_norm_grad_bias = batch_norm_train_grad_bias  # the same sum over (N, H, W)
