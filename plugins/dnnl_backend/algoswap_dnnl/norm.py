"""Batch and layer normalisation and their gradients on the oneDNN batch_normalization and
layer_normalization primitives.

batchnorm2d runs forward_inference with use_global_stats (the running statistics), on channels-last
input in NHWC memory (oneDNN 3.2's NCHW inference kernel, ncsp_bnorm, is several times slower than its
NHWC one, and the convolutions around it work in NHWC: no copy either way); batch_norm_train
normalises with the batch's statistics. batchnorm2d_fused with relu is batchnorm2d with oneDNN's fused relu
(fuse_norm_relu) in the same primitive where the input is finite (see _fused_relu). layer_norm folds its leading dimensions into rows and its
normalised trailing dimensions into one feature dimension: a 2-D (rows, features) layer
normalisation. The gradient ops receive the forward input, not its statistics: the extension
recomputes them with a cached forward_training primitive, then runs the backward primitive
(backward_data for the input's gradient, backward with use_scale for the weight's). Bias gradients
are plain sums, done by NumPy (see BIAS_KERNEL).

instance_norm is batch normalisation of the input seen as (1, N*C, H, W): each (sample, channel)
plane becomes a channel of a batch of one, so the batch statistics over (1, H, W) are the instance
statistics over (H, W), and the gradients through them are instance norm's. The per-channel weight
is repeated for each sample; its gradient comes back per (sample, channel) and is summed over the
N samples by NumPy (N * C numbers).

group_norm (oneDNN 3.2 has no group normalization primitive) is batch normalisation, without scale or shift,
of the input seen as (1, N*G, C/G * prod(spatial), 1): each (sample, group) becomes a channel of a batch of
one. The weight and bias are per channel, which varies within a group, so NumPy applies them after it (in
PyTorch's folded form where one is not finite, see _group_folded); the input's gradient is oneDNN's backward
of grad_output * weight, and the weight's is the sum of grad_output * the normalised input over N and space.
Where an input of a gradient is not finite (a scan), PyTorch's own formula runs instead (_torch_group_grads): it
puts NaN where its sums meet inf - inf, which the standardised form does not.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from . import activation as activations
from ._layout import from_memory_order, is_channels_last, to_memory_order

_BATCH_AXES = (0, 2, 3)
# batchnorm2d_fused's activations oneDNN 3.2 fuses into its batch normalization
ACTIVATIONS = ("none", "relu")
UNFUSED_REASON = ("oneDNN 3.2's batch normalization fuses only relu (fuse_norm_relu) and takes no eltwise post-ops "
                  "(its primitive descriptor is refused): relu6, silu, hardswish and gelu run after it")


def _c(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a).reshape(-1)


# ------------------------------------------------------------------------------- batch norm


def _batch_norm(x: np.ndarray, mean: np.ndarray | None, var: np.ndarray | None, weight: np.ndarray | None,
                bias: np.ndarray | None, eps: float, channels_last: bool = False, relu: bool = False) -> np.ndarray:
    """oneDNN's batch normalisation (the batch's statistics when mean and var are None), or PyTorch's
    folded form where a per-channel parameter is not finite (a scan of a few numbers). ``channels_last``:
    NCHW ``x`` in NHWC memory, run there (the result too). ``relu``: then max(y, 0) as PyTorch's relu
    (oneDNN's fused relu where that is exact, else this backend's relu after it)."""
    params = [_c(a) for a in (mean, var, weight, bias)]
    if not all(a is None or dnnl.all_finite(a) for a in params):
        y = _folded(x, *params, eps)
        return activations.relu(y) if relu else y
    memory = to_memory_order(x, True) if channels_last else np.ascontiguousarray(x)
    fused = relu and _fused_relu(memory)
    y = dnnl.batch_norm(memory, *params, eps, channels_last, fused)
    if relu and not fused:
        y = dnnl.relu(y)
    return from_memory_order(y, True) if channels_last else y


def _fused_relu(memory: np.ndarray) -> bool:
    """Whether oneDNN's fused relu gives PyTorch's result on this input (C-contiguous): where every element is
    finite. With finite parameters the normalised value is NaN only where the input is NaN, or infinite with a
    zero scale (inf * 0); relu keeps NaN, and oneDNN's fused relu, a max with 0, makes 0 of it. The scan reads
    the input once; the separate relu it saves writes and reads the output once more."""
    return bool(dnnl.all_finite(memory))


def _folded(x: np.ndarray, mean: np.ndarray | None, var: np.ndarray | None, weight: np.ndarray | None,
            bias: np.ndarray | None, eps: float) -> np.ndarray:
    """x * alpha + beta per channel, alpha = weight / sqrt(var + eps), beta = bias - mean * alpha: how PyTorch
    computes it. oneDNN's (x - mean) * alpha + bias differs only where a parameter is infinite (an infinite
    weight meets the mean as inf - inf = NaN in PyTorch's form, and gives ±inf in oneDNN's)."""
    if mean is None or var is None:
        mean = x.mean(axis=_BATCH_AXES, dtype=np.float64).astype(np.float32)
        var = x.var(axis=_BATCH_AXES, dtype=np.float64).astype(np.float32)
    alpha = np.float32(1) / np.sqrt(var + np.float32(eps))
    if weight is not None:
        alpha = alpha * weight
    beta = -mean * alpha if bias is None else bias - mean * alpha
    with np.errstate(invalid="ignore", over="ignore"):
        y: np.ndarray = x * alpha[None, :, None, None] + beta[None, :, None, None]
    return y


def batchnorm2d(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray, weight: np.ndarray | None,
                bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias per channel, in x's memory order."""
    return _batch_norm(x, running_mean, running_var, weight, bias, eps, is_channels_last(x))


def batchnorm2d_fused(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray, weight: np.ndarray | None,
                      bias: np.ndarray | None, *, eps: float, activation: str) -> np.ndarray:
    """relu(batchnorm2d(...)) (or batchnorm2d for "none") in one oneDNN batch normalization primitive, in x's
    memory order; the predicate refuses the other activations (UNFUSED_REASON)."""
    return _batch_norm(x, running_mean, running_var, weight, bias, eps, is_channels_last(x), activation == "relu")


def batch_norm_train(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    """Normalised with this batch's mean and biased variance over (N, H, W)."""
    return _batch_norm(np.ascontiguousarray(x), None, None, weight, bias, eps)


def batch_norm_train_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, eps: float) -> np.ndarray:
    return dnnl.batch_norm_backward(np.ascontiguousarray(dy), np.ascontiguousarray(x), _c(weight), eps, "input")


def batch_norm_train_grad_weight(dy: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    return dnnl.batch_norm_backward(np.ascontiguousarray(dy), np.ascontiguousarray(x), None, eps, "weight")


def batch_norm_train_grad_bias(dy: np.ndarray) -> np.ndarray:
    """dy summed over (N, H, W) (NumPy: oneDNN 3.2's reduction would run its reference kernel)."""
    total: np.ndarray = dy.sum(axis=_BATCH_AXES)
    return total


# ------------------------------------------------------------------------------- layer norm


def _rows(shape: tuple[int, ...], normalized_ndim: int) -> tuple[int, int]:
    """(rows, features) of the 2-D view."""
    lead = len(shape) - normalized_ndim
    return math.prod(shape[:lead]), math.prod(shape[lead:])


def _2d(a: np.ndarray, normalized_ndim: int) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(_rows(a.shape, normalized_ndim))


def layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, normalized_ndim: int,
               eps: float) -> np.ndarray:
    y = dnnl.layer_norm(_2d(x, normalized_ndim), _c(weight), _c(bias), eps)
    return y.reshape(x.shape)


def layer_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, normalized_ndim: int,
                          eps: float) -> np.ndarray:
    dx = dnnl.layer_norm_backward(_2d(dy, normalized_ndim), _2d(x, normalized_ndim), _c(weight), eps, "input")
    return dx.reshape(x.shape)


def layer_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, normalized_ndim: int, eps: float) -> np.ndarray:
    dw = dnnl.layer_norm_backward(_2d(dy, normalized_ndim), _2d(x, normalized_ndim), None, eps, "weight")
    return dw.reshape(x.shape[x.ndim - normalized_ndim:])


def layer_norm_grad_bias(dy: np.ndarray, *, normalized_ndim: int) -> np.ndarray:
    """dy summed over the leading dimensions (NumPy, as for the other bias gradients)."""
    total: np.ndarray = _2d(dy, normalized_ndim).sum(axis=0).reshape(dy.shape[dy.ndim - normalized_ndim:])
    return total


# ---------------------------------------------------------------------------- instance norm


def _planes(a: np.ndarray) -> np.ndarray:
    """NCHW seen as (1, N*C, H, W)."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a).reshape(1, n * c, h, w)


def _per_plane(weight: np.ndarray | None, samples: int) -> np.ndarray | None:
    return None if weight is None else np.tile(np.ascontiguousarray(weight).reshape(-1), samples)


def instance_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, eps: float) -> np.ndarray:
    n = x.shape[0]
    y = _batch_norm(_planes(x), None, None, _per_plane(weight, n), _per_plane(bias, n), eps)
    return y.reshape(x.shape)


def instance_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, eps: float) -> np.ndarray:
    dx = dnnl.batch_norm_backward(_planes(dy), _planes(x), _per_plane(weight, x.shape[0]), eps, "input")
    return dx.reshape(x.shape)


def instance_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    """The per-plane weight gradients of oneDNN, summed over the samples."""
    dw = dnnl.batch_norm_backward(_planes(dy), _planes(x), None, eps, "weight")
    total: np.ndarray = dw.reshape(x.shape[:2]).sum(axis=0)
    return total


def instance_norm_grad_bias(dy: np.ndarray) -> np.ndarray:
    """dy summed over (N, H, W) (NumPy, as for the other bias gradients)."""
    return batch_norm_train_grad_bias(dy)


# ------------------------------------------------------------------------------- group norm


def _group_rows(a: np.ndarray, num_groups: int) -> np.ndarray:
    """(N, C, *spatial) seen as (1, N*G, C/G * prod(spatial), 1)."""
    return np.ascontiguousarray(a).reshape(1, a.shape[0] * num_groups, -1, 1)


def _channels(a: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel parameter shaped to broadcast against (N, C, *spatial) of ``ndim`` dimensions."""
    return np.ascontiguousarray(a).reshape((-1,) + (1,) * (ndim - 2))


def _standardised(x: np.ndarray, num_groups: int, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) per (sample, group), in x's shape."""
    return _batch_norm(_group_rows(x, num_groups), None, None, None, None, eps).reshape(x.shape)


def _group_folded(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, num_groups: int,
                  eps: float) -> np.ndarray:
    """x * scale + shift per (sample, channel), scale = rstd * weight, shift = bias - mean * scale: PyTorch's form,
    where a parameter is not finite (an infinite weight meets the mean as inf - inf = NaN)."""
    n, c = x.shape[:2]
    rows = x.reshape(n, num_groups, -1)
    mean = rows.mean(axis=2, dtype=np.float64).astype(np.float32)
    rstd = np.float32(1) / np.sqrt(rows.var(axis=2, dtype=np.float64).astype(np.float32) + np.float32(eps))
    mean, scale = (np.repeat(a, c // num_groups, axis=1) for a in (mean, rstd))  # (N, C)
    if weight is not None:
        scale = scale * weight.reshape(-1)
    shift = -mean * scale if bias is None else bias.reshape(-1) - mean * scale
    with np.errstate(invalid="ignore", over="ignore"):
        y: np.ndarray = x.reshape(n, c, -1) * scale[:, :, None] + shift[:, :, None]
    return y.reshape(x.shape)


def group_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, *, num_groups: int,
               eps: float) -> np.ndarray:
    if not _finite(weight, bias):
        return _group_folded(np.ascontiguousarray(x), weight, bias, num_groups, eps)
    y = _standardised(x, num_groups, eps)
    if weight is not None:
        y *= _channels(weight, x.ndim)
    if bias is not None:
        y += _channels(bias, x.ndim)
    return y


def _finite(*arrays: np.ndarray | None) -> bool:
    return all(a is None or dnnl.all_finite(np.ascontiguousarray(a)) for a in arrays)


def _torch_group_grads(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, num_groups: int,
                       eps: float) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's group-norm backward, where an input is not finite (NaN and inf land where its formula puts them):
    per (sample, channel) ds = sum(dy * x) and db = sum(dy) over space; dx = c1 * dy + c2 * x + c3 with
    c1 = rstd * weight, c2 and c3 per (sample, group) from the group's sums of weight * ds and weight * db;
    dweight = sum over N of (ds - db * mean) * rstd. Returns (dx, dweight)."""
    n, c = x.shape[:2]
    rows = x.reshape(n, num_groups, -1)
    mean = rows.mean(axis=2, dtype=np.float64).astype(np.float32)
    rstd = np.float32(1) / np.sqrt(rows.var(axis=2, dtype=np.float64).astype(np.float32) + np.float32(eps))
    dy3, x3 = dy.reshape(n, c, -1), x.reshape(n, c, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        ds, db = np.einsum("ncs,ncs->nc", dy3, x3), dy3.sum(axis=2)
        gamma = np.ones(c, np.float32) if weight is None else weight.reshape(-1)
        ds_group, db_group = ((a * gamma).reshape(n, num_groups, -1).sum(axis=2) for a in (ds, db))
        s = np.float32(num_groups * n / x.size)
        c2 = (db_group * mean - ds_group) * rstd * rstd * rstd * s
        c3 = -c2 * mean - db_group * rstd * s
        mean, rstd, c2, c3 = (np.repeat(a, c // num_groups, axis=1) for a in (mean, rstd, c2, c3))  # (N, C)
        dx = (rstd * gamma)[:, :, None] * dy3 + c2[:, :, None] * x3 + c3[:, :, None]
        dweight: np.ndarray = np.sum((ds - db * mean) * rstd, axis=0)
    return dx.reshape(x.shape), dweight


def group_norm_grad_input(dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, *, num_groups: int,
                          eps: float) -> np.ndarray:
    """oneDNN's backward of the (sample, group) standardisation, of dy * weight (the weight varies in a group)."""
    if not _finite(dy, x, weight):
        return _torch_group_grads(np.ascontiguousarray(dy), np.ascontiguousarray(x), weight, num_groups, eps)[0]
    scaled = dy if weight is None else dy * _channels(weight, x.ndim)
    dx = dnnl.batch_norm_backward(_group_rows(scaled, num_groups), _group_rows(x, num_groups), None, eps, "input")
    return dx.reshape(x.shape)


def group_norm_grad_weight(dy: np.ndarray, x: np.ndarray, *, num_groups: int, eps: float) -> np.ndarray:
    """dy * the standardised x (oneDNN), summed over N and space by NumPy."""
    if not _finite(dy, x):
        return _torch_group_grads(np.ascontiguousarray(dy), np.ascontiguousarray(x), None, num_groups, eps)[1]
    xhat = _standardised(x, num_groups, eps)
    n, c = x.shape[:2]
    total: np.ndarray = np.einsum("ncs,ncs->c", dy.reshape(n, c, -1), xhat.reshape(n, c, -1))
    return total


def group_norm_grad_bias(dy: np.ndarray) -> np.ndarray:
    """dy summed over all dimensions but the channels (NumPy, as for the other bias gradients)."""
    total: np.ndarray = dy.sum(axis=(0, *range(2, dy.ndim)))
    return total


# ---------------------------------------------------------------------- selection and kernels


def _norm_input(call: Any) -> tuple[str, list[int]]:
    """The batch-norm op an instance_norm op runs as, and the input shape its primitive sees."""
    if not call.op.startswith("instance_norm"):
        return call.op, list(call.shape("input"))
    n, c, h, w = call.shape("input")
    return call.op.replace("instance_norm", "batch_norm_train"), [1, n * c, h, w]


def _group_plan(call: Any) -> Any:
    """The primitive a group_norm op runs: the standardisation of (1, N*G, C/G * spatial, 1), or its backward."""
    x, groups = call.shape("input"), call.attrs["num_groups"]
    shape = [1, x[0] * groups, math.prod(x) // (x[0] * groups), 1]
    if call.op == "group_norm_grad_input":
        return dnnl.batch_norm_backward_impl(shape, False, call.attrs["eps"], "input")
    return dnnl.batch_norm_impl(shape, False, False, False, call.attrs["eps"])


def _plan(call: Any) -> Any:
    a = call.attrs
    if call.op.startswith("group_norm"):
        return _group_plan(call)
    op, shape = _norm_input(call)
    if op in ("batchnorm2d", "batchnorm2d_fused"):  # as swap_backend models run it: on channels-last activations
        return dnnl.batch_norm_impl(list(call.shape("input")), True, call.shape("weight") is not None,
                                    call.shape("bias") is not None, a["eps"], channels_last=True,
                                    fuse_relu=a.get("activation") == "relu")
    if op == "batch_norm_train":
        return dnnl.batch_norm_impl(shape, False, call.shape("weight") is not None,
                                    call.shape("bias") is not None, a["eps"])
    if op.startswith("batch_norm_train_grad_"):
        want = op.rsplit("_", 1)[1]
        scale = want == "input" and call.shape("weight") is not None
        return dnnl.batch_norm_backward_impl(shape, scale, a["eps"], want)
    rows = list(_rows(call.shape("input"), a["normalized_ndim"]))
    if op == "layer_norm":
        return dnnl.layer_norm_impl(rows, call.shape("weight") is not None, call.shape("bias") is not None, a["eps"])
    want = op.rsplit("_", 1)[1]
    scale = want == "input" and call.shape("weight") is not None
    return dnnl.layer_norm_backward_impl(rows, scale, a["eps"], want)


def supports(call: Any) -> bool | str:
    """oneDNN is asked: True if it makes the primitive for this call, else its refusal (batchnorm2d_fused's
    activations but relu are refused first)."""
    if call.op == "batchnorm2d_fused" and call.attrs["activation"] not in ACTIVATIONS:
        return UNFUSED_REASON
    return refusal(lambda: _plan(call))


_AFTER = {"instance_norm_grad_weight": " per (sample, channel), then numpy sum over N",
          "group_norm": " per (sample, group), then numpy's per-channel weight and bias",
          "group_norm_grad_input": " per (sample, group), of grad_output * weight (numpy)",
          "group_norm_grad_weight": " per (sample, group), then numpy's sum of grad_output * it over N and space"}


def kernel(call: Any) -> str:
    return str(_plan(call).impl) + _AFTER.get(call.op, "")
