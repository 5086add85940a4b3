"""What each op computes, written with PyTorch: the oracle of the reference checks and of the
non-finite conformance suite (tests/test_nonfinite.py).

``TORCH`` maps an op to a function of torch tensors (float64; a CSR matrix as a sparse COO tensor,
so that only its stored entries take part, as in torch.sparse) and the op's attributes.
Gradient ops are torch autograd's vector-Jacobian products of their forward op (an input the
gradient does not read is given as zeros of its size), or, for those that take the forward
output, the backward formula torch's autograd applies. Ops missing here (dropout's mask is ours,
optimizer updates are stateful) have the NumPy reference as their oracle.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from algoswap import FUSED_ACTIVATIONS

F = torch.nn.functional
aten = torch.ops.aten
Fn = Callable[..., Any]


def _zeros(shape: Any) -> Any:
    return torch.zeros(tuple(shape), dtype=torch.float64)


def _vjp(forward: Fn, primal: Any, grad_output: Any) -> Any:
    """The gradient of ``forward`` at ``primal`` along ``grad_output`` (torch autograd)."""
    primal = primal.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(forward(primal), primal, grad_output)
    return grad


def _dims(x: Any, axes: Any) -> tuple[int, ...]:
    return tuple(range(x.ndim)) if axes is None else ((axes,) if isinstance(axes, int) else tuple(axes))


def _pad(x: Any, pads: Any, mode: str = "constant", value: float = 0.0) -> Any:
    pads = tuple(pads)
    while len(pads) > 1 and tuple(pads[0]) == (0, 0):  # canonical pads name every axis: torch wants the padded ones
        pads = pads[1:]
    flat = [p for pair in reversed(pads) for p in pair]
    if mode == "constant":
        return F.pad(x, flat, value=value)
    if x.ndim > len(pads):
        return F.pad(x, flat, mode=mode)
    return F.pad(x.unsqueeze(0), flat, mode=mode).squeeze(0)  # torch's reflect/replicate want a batch dimension


def _split(x: Any, sections: Any, index: int, axis: int = 0) -> Any:
    parts = torch.tensor_split(x, sections, dim=axis) if isinstance(sections, int) else torch.split(x, list(sections), dim=axis)
    return parts[index]


def _slice(x: Any, begin: Any, size: Any, step: Any = None) -> Any:
    begin, size = np.atleast_1d(begin), np.atleast_1d(size)
    step = np.ones_like(begin) if step is None else np.atleast_1d(step)
    return x[tuple(slice(b, None if s == -1 else b + (s - 1) * t + 1 if s else b, t) for b, s, t in zip(begin, size, step))]


def _matmul(a: Any, b: Any, trans_a: bool = False, trans_b: bool = False) -> Any:
    return (a.mT if trans_a else a) @ (b.mT if trans_b else b)


def _reduce(fn: Fn) -> Fn:
    return lambda x, axes=None, keepdims=False: fn(x, dim=_dims(x, axes), keepdim=keepdims)


def _cross_entropy(logits: Any, labels: Any, reduction: str = "mean") -> Any:
    return F.cross_entropy(logits, labels, reduction=reduction)


def _sparse_t(a: Any, transposed: bool) -> Any:
    return a.t() if transposed and a.layout != torch.strided else (a.T if transposed else a)


def _conv2d(x: Any, w: Any, b: Any, stride: Any = 1, padding: Any = ((0, 0), (0, 0)), dilation: Any = 1, groups: int = 1,
            padding_mode: str = "zeros") -> Any:
    (top, bottom), (left, right) = padding
    padded = F.pad(x, (left, right, top, bottom), mode="constant" if padding_mode == "zeros" else padding_mode)
    return F.conv2d(padded, w, b, stride=stride, dilation=dilation, groups=groups)


def _activated(y: Any, activation: str) -> Any:
    if activation == "none":
        return y
    op, op_attrs = FUSED_ACTIVATIONS[activation]
    return FORWARD[op](y, **op_attrs)


def _conv2d_fused(x: Any, w: Any, b: Any, residual: Any, activation: str, **attrs: Any) -> Any:
    y = _conv2d(x, w, b, **attrs)
    return _activated(y if residual is None else y + residual, activation)


def _batchnorm2d(x: Any, mean: Any, var: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    return F.batch_norm(x, mean, var, w, b, training=False, eps=eps)


def _layer_norm(x: Any, w: Any, b: Any, normalized_ndim: int = 1, eps: float = 1e-5) -> Any:
    return F.layer_norm(x, x.shape[x.ndim - normalized_ndim:], w, b, eps)


def _batch_norm_train(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    return F.batch_norm(x, None, None, w, b, training=True, eps=eps)


def _dropout(channels: bool) -> Fn:
    """torch's dropout (the input times the scaled mask: a dropped NaN or inf stays non-finite) with
    algoswap's counter-based mask, which is the spec's, not torch's."""
    def dropout(x: Any, p: float = 0.5, seed: int = 0, training: bool = True) -> Any:
        from algoswap_numpy.dropout import keep_mask

        if not training or p == 0:
            return x.clone()
        mask = torch.from_numpy(keep_mask(tuple(x.shape[:2]) if channels else tuple(x.shape), p, seed))
        mask = mask[:, :, None, None] if channels else mask
        return x * (mask.to(x.dtype) / (1 - p))

    return dropout


# activations whose gradient op takes (grad_output, input, attributes): autograd's vector-Jacobian product
ACTIVATIONS: dict[str, Fn] = {
    "hardtanh": lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val),
    "silu": F.silu,
    "gelu": lambda x, approximate="none": F.gelu(x, approximate=approximate),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "elu": lambda x, alpha=1.0: F.elu(x, alpha),
    "mish": F.mish,
}


# torch 2.13's CPU kernels give some gradients at a NaN input one value in the vectorized body of an array and
# another in its scalar tail (the last n % 64 elements or so): hardtanh 0 and grad_output, hardswish and elu NaN
# and grad_output. The oracle runs them on arrays padded to whole vector blocks, so that every element takes the
# body's path, the one most elements of any tensor take.
VECTOR_BLOCK = 64


def _in_vector_blocks(function: Fn) -> Fn:
    """``function`` of same-shape tensors, run on their flat copies padded with zeros to whole vector blocks."""
    def padded(*tensors: Any) -> Any:
        size = tensors[0].numel()
        pad = -size % VECTOR_BLOCK
        flat = [torch.cat([t.reshape(-1), torch.zeros(pad, dtype=t.dtype)]) for t in tensors]
        return function(*flat)[:size].reshape(tensors[0].shape)

    return padded


def _activation_grad(forward: Fn) -> Fn:
    return lambda dy, x, **attrs: _in_vector_blocks(lambda g, v: _vjp(lambda u: forward(u, **attrs), v, g))(dy, x)


def _upsample(x: Any, size: Any, scale_factor: Any, mode: str, align_corners: Any) -> Any:
    """aten's upsampling, which takes the output size and the scale factors that map coordinates together."""
    scales = (None, None) if scale_factor is None else tuple(scale_factor)
    if mode == "nearest":
        return aten.upsample_nearest2d(x, list(size), *scales)
    return getattr(aten, f"upsample_{mode}2d")(x, list(size), bool(align_corners), *scales)


def _interpolate(x: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: Any = None,
                 recompute_scale_factor: Any = None) -> Any:
    if size is not None and scale_factor is not None:  # the canonical form, aten's
        return _upsample(x, size, scale_factor, mode, align_corners)
    return F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)


def _attention(q: Any, k: Any, v: Any, mask: Any = None, is_causal: bool = False, scale: Any = None) -> Any:
    """torch's math path (algoswap._specs.attention says why not its CPU flash kernel, which it picks for 4-D inputs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


FORWARD: dict[str, Fn] = {
    "conv2d": _conv2d,
    "conv2d_fused": _conv2d_fused,
    "linear": F.linear,
    "maxpool2d": lambda x, kernel_size, stride, padding, dilation, ceil_mode: F.max_pool2d(
        x, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode),
    "avgpool2d": lambda x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: F.avg_pool2d(
        x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override),
    "adaptiveavgpool2d": lambda x, output_size: F.adaptive_avg_pool2d(x, output_size),
    "interpolate": _interpolate,
    "scaled_dot_product_attention": _attention,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": lambda x, negative_slope=0.01: F.leaky_relu(x, negative_slope),
    **ACTIVATIONS,
    "flatten": lambda x, start_dim=1, end_dim=-1: torch.flatten(x, start_dim, end_dim),
    "reshape": lambda x, shape: x.reshape(shape),
    "concat": lambda *xs, axis=0: torch.cat(xs, axis),
    "batchnorm2d": _batchnorm2d,
    "batchnorm2d_fused": lambda x, mean, var, w, b, eps=1e-5, activation="none": _activated(
        _batchnorm2d(x, mean, var, w, b, eps), activation),
    "batch_norm_train": _batch_norm_train,
    "layer_norm": _layer_norm,
    "softmax": lambda x, axis=-1: torch.softmax(x, axis),
    "log_softmax": lambda x, axis=-1: torch.log_softmax(x, axis),
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "neg": torch.neg,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "add_scalar": lambda x, value: x + value,
    "mul_scalar": lambda x, value: x * value,
    "rdiv_scalar": lambda x, value: value / x,
    "pow_scalar": lambda x, exponent: x**exponent,
    "clamp_min": lambda x, value: torch.clamp_min(x, value),
    "zeros_like": torch.zeros_like,
    "ones_like": torch.ones_like,
    "matmul": _matmul,
    "batch_matmul": _matmul,
    "reduce_sum": _reduce(torch.sum),
    "reduce_mean": _reduce(torch.mean),
    "reduce_max": _reduce(torch.amax),
    "broadcast_to": lambda x, shape: x.broadcast_to(shape),
    "sum_to_shape": lambda x, shape: x.sum_to_size(shape) if shape else x.sum(),
    "slice": _slice,
    "split": _split,
    "pad": _pad,
    "transpose": lambda x, perm=None: x.permute(perm or tuple(reversed(range(x.ndim)))),
    "one_hot": lambda i, num_classes, dtype="float32": F.one_hot(i, num_classes).to(getattr(torch, dtype)),
    "where": torch.where,
    "embedding": lambda w, i: F.embedding(i, w),
    "instance_norm": lambda x, w, b, eps=1e-5: F.instance_norm(x, weight=w, bias=b, eps=eps),
    "group_norm": lambda x, w, b, num_groups, eps=1e-5: F.group_norm(x, num_groups, weight=w, bias=b, eps=eps),
    "dropout": _dropout(channels=False),
    "dropout2d": _dropout(channels=True),
    "softmax_cross_entropy": _cross_entropy,
    "binary_cross_entropy": lambda x, t, reduction="mean": F.binary_cross_entropy(x, t, reduction=reduction),
    "csrmv": lambda a, v, trans=False: _sparse_t(a, trans) @ v,
    "csrmm": lambda a, b, trans_a=False, trans_b=False: _sparse_t(a, trans_a) @ (b.T if trans_b else b),
}


def _conv_grad_input(dy: Any, w: Any, input_size: Any, **attrs: Any) -> Any:
    return _vjp(lambda x: _conv2d(x, w, None, **attrs), _zeros(input_size), dy)


def _conv_grad_weight(dy: Any, x: Any, weight_size: Any, **attrs: Any) -> Any:
    return _vjp(lambda w: _conv2d(x, w, None, **attrs), _zeros(weight_size), dy)


def _matmul_sizes(dy: Any, other: Any, trans_a: bool, trans_b: bool, of_a: bool) -> tuple[int, ...]:
    """The shape of the operand a 2-D matmul's gradient is taken for (a if of_a, else b)."""
    if of_a:
        inner = other.shape[-1] if trans_b else other.shape[-2]
        return (inner, dy.shape[-2]) if trans_a else (dy.shape[-2], inner)
    inner = other.shape[-2] if trans_a else other.shape[-1]
    return (dy.shape[-1], inner) if trans_b else (inner, dy.shape[-1])


def _leading_sum(dy: Any, trailing: int) -> Any:
    return dy.sum(dim=tuple(range(dy.ndim - trailing))) if dy.ndim > trailing else dy


def _attention_grad(position: int) -> Fn:
    """The vector-Jacobian product of the attention for query (0), key (1) or value (2)."""
    def gradient(dy: Any, q: Any, k: Any, v: Any, mask: Any = None, **attrs: Any) -> Any:
        arrays = [q, k, v]
        def forward(moved: Any) -> Any:
            return _attention(*(moved if i == position else a for i, a in enumerate(arrays)), mask, **attrs)
        return _vjp(forward, arrays[position], dy)
    return gradient


GRADIENT: dict[str, Fn] = {
    "conv2d_grad_input": _conv_grad_input,
    "conv2d_grad_weight": _conv_grad_weight,
    "conv2d_grad_bias": lambda dy: dy.sum((0, 2, 3)),
    "linear_grad_input": lambda dy, w: _vjp(lambda x: F.linear(x, w), _zeros(dy.shape[:-1] + (w.shape[1],)), dy),
    "linear_grad_weight": lambda dy, x: _vjp(lambda w: F.linear(x, w), _zeros((dy.shape[-1], x.shape[-1])), dy),
    "linear_grad_bias": lambda dy: _leading_sum(dy, 1),
    "maxpool2d_grad": lambda dy, x, **a: _vjp(lambda v: FORWARD["maxpool2d"](v, **a), x, dy),
    "avgpool2d_grad": lambda dy, input_size, **a: _vjp(lambda v: FORWARD["avgpool2d"](v, **a), _zeros(input_size), dy),
    "adaptiveavgpool2d_grad": lambda dy, input_size: _vjp(lambda v: F.adaptive_avg_pool2d(v, dy.shape[2:]), _zeros(input_size), dy),
    "interpolate_grad": lambda dy, input_size, scale_factor=None, mode="nearest", align_corners=None: _vjp(
        lambda x: _upsample(x, dy.shape[2:], scale_factor, mode, align_corners), _zeros(input_size), dy),
    **{f"scaled_dot_product_attention_grad_{name}": _attention_grad(position) for position, name in enumerate(("query", "key", "value"))},
    "relu_grad": lambda dy, x: _vjp(F.relu, x, dy),
    "sigmoid_grad": lambda dy, y: aten.sigmoid_backward(dy, y),
    "tanh_grad": lambda dy, y: aten.tanh_backward(dy, y),
    "leaky_relu_grad": lambda dy, x, negative_slope=0.01: _vjp(lambda v: F.leaky_relu(v, negative_slope), x, dy),
    **{f"{op}_grad": _activation_grad(forward) for op, forward in ACTIVATIONS.items()},
    # torch's float64 hardsigmoid backward multiplies by 1/6 rounded to float32 (3e-8 off): the same gradient
    # through relu6(x + 3) / 6 (NaN input: 0 either way)
    "hardsigmoid_grad": _activation_grad(lambda x: F.relu6(x + 3) / 6),
    "batch_norm_train_grad_input": lambda dy, x, w, eps=1e-5: _vjp(lambda v: _batch_norm_train(v, w, None, eps), x, dy),
    "batch_norm_train_grad_weight": lambda dy, x, eps=1e-5: _vjp(lambda w: _batch_norm_train(x, w, None, eps),
                                                                  torch.ones(x.shape[1], dtype=x.dtype), dy),
    "batch_norm_train_grad_bias": lambda dy: dy.sum((0, 2, 3)),
    "layer_norm_grad_input": lambda dy, x, w, normalized_ndim=1, eps=1e-5: _vjp(
        lambda v: _layer_norm(v, w, None, normalized_ndim, eps), x, dy),
    "layer_norm_grad_weight": lambda dy, x, normalized_ndim=1, eps=1e-5: _vjp(
        lambda w: _layer_norm(x, w, None, normalized_ndim, eps), torch.ones(x.shape[x.ndim - normalized_ndim:], dtype=x.dtype), dy),
    "layer_norm_grad_bias": lambda dy, normalized_ndim=1: _leading_sum(dy, normalized_ndim),
    "instance_norm_grad_input": lambda dy, x, w, eps=1e-5: _vjp(lambda v: F.instance_norm(v, weight=w, eps=eps), x, dy),
    "instance_norm_grad_weight": lambda dy, x, eps=1e-5: _vjp(lambda w: F.instance_norm(x, weight=w, eps=eps),
                                                               torch.ones(x.shape[1], dtype=x.dtype), dy),
    "instance_norm_grad_bias": lambda dy: dy.sum((0, 2, 3)),
    "group_norm_grad_input": lambda dy, x, w, num_groups, eps=1e-5: _vjp(
        lambda v: F.group_norm(v, num_groups, weight=w, eps=eps), x, dy),
    "group_norm_grad_weight": lambda dy, x, num_groups, eps=1e-5: _vjp(
        lambda w: F.group_norm(x, num_groups, weight=w, eps=eps), torch.ones(x.shape[1], dtype=x.dtype), dy),
    "group_norm_grad_bias": lambda dy: dy.sum((0, *range(2, dy.ndim))),
    "softmax_grad": lambda dy, y, axis=-1: aten._softmax_backward_data(dy, y, axis, y.dtype),
    "log_softmax_grad": lambda dy, y, axis=-1: aten._log_softmax_backward_data(dy, y, axis, y.dtype),
    "sub_grad_b": lambda dy, shape: _vjp(lambda b: _zeros(dy.shape) - b, _zeros(shape), dy),
    "mul_grad": lambda dy, other, shape: _vjp(lambda a: a * other, _zeros(shape), dy),
    "div_grad_a": lambda dy, other, shape: _vjp(lambda a: a / other, _zeros(shape), dy),
    "div_grad_b": lambda dy, a, b, shape: _vjp(lambda v: a / v, b, dy),
    "sqrt_grad": lambda dy, y: dy / (2 * y),  # torch's formula from the result (tools/autograd/derivatives.yaml)
    "rsqrt_grad": lambda dy, y: -0.5 * dy * y.pow(3),
    "rdiv_scalar_grad": lambda dy, x, value: _vjp(lambda v: value / v, x, dy),
    "pow_scalar_grad": lambda dy, x, exponent: _vjp(lambda v: v**exponent, x, dy),
    "clamp_min_grad": lambda dy, x, value: _vjp(lambda v: torch.clamp_min(v, value), x, dy),
    "matmul_grad_a": lambda dy, b, trans_a=False, trans_b=False: _vjp(
        lambda a: _matmul(a, b, trans_a, trans_b), _zeros(_matmul_sizes(dy, b, trans_a, trans_b, True)), dy),
    "matmul_grad_b": lambda dy, a, trans_a=False, trans_b=False: _vjp(
        lambda b: _matmul(a, b, trans_a, trans_b), _zeros(_matmul_sizes(dy, a, trans_a, trans_b, False)), dy),
    "batch_matmul_grad_a": lambda dy, b, a_size, trans_a=False, trans_b=False: _vjp(
        lambda a: _matmul(a, b, trans_a, trans_b), _zeros(a_size), dy),
    "batch_matmul_grad_b": lambda dy, a, b_size, trans_a=False, trans_b=False: _vjp(
        lambda b: _matmul(a, b, trans_a, trans_b), _zeros(b_size), dy),
    "reduce_sum_grad": lambda dy, input_size, axes=None, keepdims=False: _vjp(
        lambda x: FORWARD["reduce_sum"](x, axes, keepdims), _zeros(input_size), dy),
    "reduce_mean_grad": lambda dy, input_size, axes=None, keepdims=False: _vjp(
        lambda x: FORWARD["reduce_mean"](x, axes, keepdims), _zeros(input_size), dy),
    "reduce_max_grad": lambda dy, x, axes=None, keepdims=False: _vjp(lambda v: FORWARD["reduce_max"](v, axes, keepdims), x, dy),
    "slice_grad": lambda dy, begin, input_size, step=None: _vjp(lambda x: _slice(x, begin, dy.shape, step), _zeros(input_size), dy),
    "pad_grad": lambda dy, pads, input_size, mode="constant": _vjp(lambda x: _pad(x, pads, mode), _zeros(input_size), dy),
    "where_grad": lambda dy, condition, branch: _vjp(
        lambda v: torch.where(condition, v, _zeros(dy.shape)) if branch == "x" else torch.where(condition, _zeros(dy.shape), v),
        _zeros(dy.shape), dy),
    "embedding_grad": lambda dy, indices, num_embeddings: _vjp(
        lambda w: F.embedding(indices, w), _zeros((num_embeddings, dy.shape[-1])), dy),
    "dropout_grad": lambda dy, **a: _vjp(lambda x: FORWARD["dropout"](x, **a), _zeros(dy.shape), dy),
    "dropout2d_grad": lambda dy, **a: _vjp(lambda x: FORWARD["dropout2d"](x, **a), _zeros(dy.shape), dy),
    "softmax_cross_entropy_grad": lambda dy, logits, labels, reduction="mean": _vjp(
        lambda v: _cross_entropy(v, labels, reduction), logits, dy),
    "binary_cross_entropy_grad": lambda dy, x, t, reduction="mean": _vjp(
        lambda v: F.binary_cross_entropy(v, t, reduction=reduction), x, dy),
    "csrmm_grad_dense": lambda a, dy, trans_a=False, trans_b=False: _vjp(
        lambda b: FORWARD["csrmm"](a, b, trans_a, trans_b),
        _zeros((dy.shape[-1], a.shape[1 - trans_a]) if trans_b else (a.shape[1 - trans_a], dy.shape[-1])), dy),
}

TORCH: dict[str, Fn] = {**FORWARD, **GRADIENT}


def to_torch(array: Any, differentiable: bool = False) -> Any:
    """A torch tensor of ``array``: floating arrays in float64, a CSR matrix as a sparse COO tensor."""
    if array is None:
        return None
    if not isinstance(array, np.ndarray):
        coo = array.tocoo()
        return torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data.astype(np.float64), coo.shape, check_invariants=True)
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        return torch.tensor(array.astype(np.float64), requires_grad=differentiable)
    return torch.from_numpy(array)
