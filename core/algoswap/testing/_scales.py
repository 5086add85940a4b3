"""The scale and reduction length of every op's result, for the tolerance policy of
algoswap/testing/_tolerance.py: ``op_scale(op, inputs, attrs)`` gives, for float64 copies of a call's inputs, the
elementwise magnitude of the terms each result element is computed from and the number of terms
added to make one element.

Ops fall into four kinds:
- SUMS, sums of products of their inputs (convolutions, matrix products, reductions, scatters):
  the scale is the reference evaluated on the inputs' absolute values, and the reduction length is
  the reference evaluated on ones (each element then counts its own terms).
- MEANS: as SUMS for the scale; the length is the number of terms averaged (ones would count 1).
- ELEMENTWISE ops whose result cannot cancel (activations, data movement, maxima, one rounding of
  exact inputs): the scale is the result itself, the length 1.
- The rest (softmax, normalisations, losses, gradients of softmax, sigmoid and tanh) spell their terms
  out below; values updated in place (optimizers) are scaled by ``update_scale``.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable

import numpy as np

import algoswap
from ._cases import reference_name
from ._scales_activations import ACTIVATION_RULES
from ._tolerance import as_float64

Scale = tuple[Any, int]  # (elementwise magnitudes or None for "the result itself", reduction length)

SUMS = {
    "conv2d", "conv2d_fused", "conv2d_grad_input", "conv2d_grad_weight", "conv2d_grad_bias",
    "linear", "linear_grad_input", "linear_grad_weight", "linear_grad_bias",
    "matmul", "matmul_grad_a", "matmul_grad_b", "batch_matmul", "batch_matmul_grad_a", "batch_matmul_grad_b",
    "csrmv", "csrmm", "csrmm_grad_dense", "reduce_sum", "reduce_sum_grad", "sum_to_shape", "mul", "mul_grad",
    "div", "div_grad_a", "div_grad_b", "sub_grad_b", "maxpool2d_grad", "embedding_grad", "pad_grad", "slice_grad",
    "where_grad", "layer_norm_grad_bias", "batch_norm_train_grad_bias", "instance_norm_grad_bias", "group_norm_grad_bias",
}
# One rounding of exact inputs is an error relative to the result itself, even for a - b near zero.
ELEMENTWISE = {
    "add", "sub", "add_scalar", "relu", "relu_grad", "leaky_relu", "leaky_relu_grad", "sigmoid", "tanh", "neg",
    "sqrt", "rsqrt", "sqrt_grad", "mul_scalar", "pow_scalar", "pow_scalar_grad", "rdiv_scalar",
    "rdiv_scalar_grad", "clamp_min", "clamp_min_grad", "flatten", "reshape", "concat", "transpose", "slice", "split", "pad", "broadcast_to",
    "one_hot", "zeros_like", "ones_like", "where", "embedding", "maxpool2d", "dropout", "dropout2d", "dropout_grad",
    "dropout2d_grad", "hardtanh", "hardtanh_grad", "hardsigmoid_grad", "silu", "mish", "elu_grad",
    "reduce_max", "reduce_max_grad",
    # communication, which the kit checks in a group of one rank, where it moves data
    "allreduce", "allreduce_grad", "allreduce_start", "comm_wait", "allgather", "reduce_scatter", "broadcast",
    "broadcast_grad", "all_to_all", "sendrecv", "shard_indices",
}


def _reference(op: str, inputs: list[Any], attrs: dict[str, Any]) -> np.ndarray:
    return np.asarray(algoswap.ops.call(op, *inputs, algorithm=reference_name(op), **attrs), dtype=np.float64)


def _is_float(a: Any) -> bool:
    return a is not None and getattr(a, "dtype", np.dtype(int)).kind == "f"


def _magnitudes(inputs: list[Any]) -> list[Any]:
    return [abs(a) if _is_float(a) else a for a in inputs]


def _ones(inputs: list[Any]) -> list[Any]:
    def one(a: Any) -> Any:
        if not _is_float(a):
            return a
        if isinstance(a, np.ndarray):
            return np.ones_like(a)
        ones = a.copy()  # a CSR matrix: its stored entries
        ones.data[:] = 1
        return ones
    return [one(a) for a in inputs]


def sum_scale(compute: Callable[..., Any], inputs: list[Any]) -> Scale:
    """The rule of SUMS for any ``compute`` that sums products of its inputs: ``compute`` on their absolute
    values, and the most terms one element adds (``compute`` on ones counts them)."""
    inputs = [_widened(a) for a in inputs]
    terms = int(np.ceil(np.max(as_float64(compute(*_ones(inputs))), initial=1)))
    return np.abs(as_float64(compute(*_magnitudes(inputs)))), terms


# conv2d_fused's activations -> the largest |slope| each has (an error of the sum before it grows by that much)
ACTIVATION_SLOPES = {"none": 1.0, "relu": 1.0, "relu6": 1.0, "silu": 1.1, "hardswish": 1.5, "gelu": 1.13}


def _sum(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    if op == "conv2d_fused":  # the sum's terms, before the activation, times its largest slope
        scale, terms = sum_scale(lambda *arrays: _reference(op, list(arrays), {**attrs, "activation": "none"}), inputs)
        return scale * ACTIVATION_SLOPES[attrs["activation"]], terms
    return sum_scale(lambda *arrays: _reference(op, list(arrays), attrs), inputs)


def _mean(length: Callable[[tuple[int, ...], tuple[int, ...], dict[str, Any]], int]) -> Callable[[str, list[Any], dict[str, Any]], Scale]:
    """A mean's rule; ``length(input shape, result shape, attrs)`` counts the terms averaged."""
    def rule(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
        scale = np.abs(_reference(op, _magnitudes(inputs), attrs))
        return scale, length(inputs[0].shape, scale.shape, attrs)
    return rule


def _adaptive_window(first: tuple[int, ...], result: tuple[int, ...], attrs: dict[str, Any]) -> int:
    """The most pixels one adaptive window averages (or, for the gradient, the most windows one pixel feeds)."""
    return math.prod(-(-max(a, b) // min(a, b)) + 1 for a, b in zip(first[2:], result[2:]))


MEANS: dict[str, Callable[[str, list[Any], dict[str, Any]], Scale]] = {
    "reduce_mean": _mean(lambda first, result, attrs: math.prod(first) // max(math.prod(result), 1)),
    "reduce_mean_grad": _mean(lambda first, result, attrs: 1),
    "avgpool2d": _mean(lambda first, result, attrs: int(np.prod(np.broadcast_to(attrs["kernel_size"], 2)))),
    "avgpool2d_grad": _mean(lambda first, result, attrs: int(np.prod(np.broadcast_to(attrs["kernel_size"], 2)))),
    "adaptiveavgpool2d": _mean(_adaptive_window),
    "adaptiveavgpool2d_grad": _mean(_adaptive_window),
}


# ------------------------------------------------------------------------------ spelled-out terms

def _sigmoid_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy * y * (1 - y): 1 - y cancels where y is near 1 (the cases draw y of either sign)."""
    dy, y = inputs
    return np.abs(dy) * np.abs(y) * (1 + np.abs(y)), 1


def _tanh_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy * (1 - y * y): cancels where |y| is near 1."""
    dy, y = inputs
    return np.abs(dy) * (1 + y * y), 1


def _rsqrt_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """-dy * y**3 / 2 from the output y: a rounding error of y counts three times."""
    return None, 3


def _softmax(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """exp(x - max) / sum: positive terms, so the result itself."""
    return None, inputs[0].shape[attrs["axis"]]


# How many ulps (of 1) a log may be off where its argument is near 1: libm's log is within 1, oneDNN 3.2's
# jit log (in dnnl:direct log_softmax) was measured 65u off at s = 1.03 over 10,000 rows of 2 to 1000 entries.
LOG_ULPS = 64


def _log_softmax(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """(x - max) - log(s), s = sum(exp(x - max)) >= 1: the dominant entry is near zero, its terms are not.
    s carries a relative error (n*u), which the log turns into an absolute one: hence the term 1."""
    x, axis = inputs[0], attrs["axis"]
    top = np.max(x, axis=axis, keepdims=True)
    lse = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))
    return np.abs(x - top) + lse + 1, x.shape[axis] + LOG_ULPS


def _softmax_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """y * (dy - sum(dy * y)): near zero where one entry of y dominates."""
    dy, y = np.abs(inputs[0]), np.abs(inputs[1])
    axis = attrs["axis"]
    return y * (dy + np.sum(dy * y, axis=axis, keepdims=True)), y.shape[axis]


def _log_softmax_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy - exp(y) * sum(dy)."""
    dy, y = np.abs(inputs[0]), inputs[1]
    axis = attrs["axis"]
    return dy + np.exp(y) * np.sum(dy, axis=axis, keepdims=True), y.shape[axis]


def _norm_view(op: str, x: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, tuple[int, ...]]:
    """x as its normalisation sees it, and the axes normalised together: trailing ones (layer_norm), spatial
    (instance_norm), a group's channels and space ((N, G, C/G, spatial): group_norm), all but channels."""
    if op.startswith("layer_norm"):
        return x, tuple(range(x.ndim - attrs.get("normalized_ndim", 1), x.ndim))
    if op.startswith("group_norm"):
        groups = attrs["num_groups"]
        return x.reshape(x.shape[0], groups, x.shape[1] // groups, -1), (2, 3)
    return x, (2, 3) if op.startswith("instance_norm") else (0, 2, 3)


def _param(op: str, p: Any, x: np.ndarray) -> Any:
    """|weight| or |bias| broadcast against x (1 or 0 when absent)."""
    if p is None:
        return None
    return np.abs(p) if op.startswith("layer_norm") else np.abs(p).reshape((-1,) + (1,) * (x.ndim - 2))


def _centred_terms(op: str, x: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, int]:
    """(|x| + |mean|) / std, the magnitude of the normalised input's terms; std (both in x's shape); the group size."""
    view, axes = _norm_view(op, x, attrs)
    mean = np.mean(view, axis=axes, keepdims=True)
    std = np.sqrt(np.var(view, axis=axes, keepdims=True) + attrs.get("eps", 1e-5))
    terms = (np.abs(view) + np.abs(mean)) / std
    return terms.reshape(x.shape), np.broadcast_to(std, view.shape).reshape(x.shape), math.prod(view.shape[a] for a in axes)


def _norm_forward(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    x, weight, bias = inputs
    terms, _, count = _centred_terms(op, x, attrs)
    w, b = _param(op, weight, x), _param(op, bias, x)
    return terms * (1 if w is None else w) + (0 if b is None else b), count


def _norm_grad_input(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    dy, x, weight = inputs
    terms, std, count = _centred_terms(op, x, attrs)
    w = _param(op, weight, x)
    d = np.abs(dy) * (1 if w is None else w)

    def group_mean(a: np.ndarray) -> np.ndarray:
        view, axes = _norm_view(op, a, attrs)
        return np.broadcast_to(np.mean(view, axis=axes, keepdims=True), view.shape).reshape(a.shape)

    return (d + group_mean(d) + terms * group_mean(d * terms)) / std, count


def _norm_grad_weight(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """Sum of dy * x_hat over what the parameter is shared by: that sum's terms, then the group's statistics."""
    dy, x = inputs
    terms, _, group = _centred_terms(op, x, attrs)
    summed = tuple(range(x.ndim - attrs["normalized_ndim"])) if op.startswith("layer_norm") else (0, *range(2, x.ndim))
    return np.sum(np.abs(dy) * terms, axis=summed), math.prod(x.shape[a] for a in summed) + group


def _batchnorm2d(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """(x - mean) / sqrt(var + eps) * w + b, which implementations fold into x * s + (b - mean * s); a fused
    activation after it (batchnorm2d_fused) grows its error by the activation's largest slope."""
    x, mean, var, weight, bias = inputs
    w, b = _param(op, weight, x), _param(op, bias, x)
    terms = (np.abs(x) + np.abs(mean)[:, None, None]) / np.sqrt(var + attrs["eps"])[:, None, None]
    slope = ACTIVATION_SLOPES[attrs.get("activation", "none")]
    return (terms * (1 if w is None else w) + (0 if b is None else b)) * slope, 1


def _targets(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return np.abs(labels) if labels.ndim == 2 else np.asarray(np.eye(logits.shape[1])[labels])


def _reduced(rows: np.ndarray, reduction: str) -> np.ndarray:
    return rows if reduction == "none" else (np.sum(rows) if reduction == "sum" else np.mean(rows))


def _cross_entropy(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """sum(t * (lse - x)) per row: lse - x is near zero for a dominant logit."""
    logits, labels = inputs
    top = np.max(logits, axis=1, keepdims=True)
    lse = top + np.log(np.sum(np.exp(logits - top), axis=1, keepdims=True))
    rows = np.sum(_targets(logits, labels) * (np.abs(lse) + np.abs(logits) + 1), axis=1)  # + 1: see _log_softmax
    return _reduced(rows, attrs.get("reduction", "mean")), logits.shape[1] + logits.shape[0] + LOG_ULPS


def _cross_entropy_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """(softmax * sum(t) - t) * dy: near zero where the softmax matches the target."""
    dy, logits, labels = inputs
    reduction = attrs.get("reduction", "mean")
    targets = _targets(logits, labels)
    p = np.exp(logits - np.max(logits, axis=1, keepdims=True))
    p /= np.sum(p, axis=1, keepdims=True)
    per_row = np.abs(dy).reshape(-1, 1) if reduction == "none" else np.abs(dy) / (logits.shape[0] if reduction == "mean" else 1)
    return (p * np.sum(targets, axis=1, keepdims=True) + targets) * per_row, logits.shape[1]


def _binary_cross_entropy(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """-(t log x + (1 - t) log(1 - x)): positive terms, so the result itself."""
    reduction = attrs.get("reduction", "mean")
    return None, (1 if reduction == "none" else inputs[0].size) + LOG_ULPS


def _binary_cross_entropy_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy * (x - t) / (x (1 - x)): near zero where x matches t."""
    dy, x, target = inputs
    count = x.size if attrs.get("reduction", "mean") == "mean" else 1
    return np.abs(dy) * (x + np.abs(target)) / np.maximum(x * (1 - x), 1e-12) / count, 1


def _interpolate(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """Sums of taps times weights (weights >= 0: the reference on |x|), whose coordinates are computed in the
    input's precision as torch does: off by a rounding of a coordinate up to the largest size, in weight."""
    scale, terms = _sum(op, inputs, attrs)
    sizes = attrs["input_size"][2:] if op == "interpolate_grad" else inputs[0].shape[2:]
    return scale, terms + max(*sizes, *np.shape(scale)[2:])


def _attention(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """Products of the softmax weights P >= 0 of the scores s = scale * q @ k^T (+ mask). A rounding of s (E
    terms of |scale * q * k|) changes each weight relatively by that much, the softmax adds S roundings: the
    weights' magnitude is P * (1 + |s|), |s| the largest score term sum of the row. Gradients add their
    products' terms: dV = P^T dy, dS = P * (dP - rowsum(dP * P)) with dP = dy v^T, dQ = scale dS k, dK = scale dS^T q."""
    attention_weights = importlib.import_module("algoswap_numpy.attention").attention_weights  # the reference's

    call = algoswap.registry().spec(op).bind([getattr(a, "shape", None) for a in inputs],
                                             [None if a is None else str(a.dtype) for a in inputs], attrs)
    dy, (q, k, v, mask) = (inputs[0], inputs[1:]) if op.endswith(("_query", "_key", "_value")) else (None, inputs)
    scale, causal = call.attrs["scale"], call.attrs["is_causal"]
    terms = abs(scale) * np.max(np.abs(q) @ np.swapaxes(np.abs(k), -1, -2), axis=-1, keepdims=True)
    weights = attention_weights(q, k, mask, causal, scale) * (1 + terms)
    length = q.shape[-1] + k.shape[-2] + q.shape[-2] + v.shape[-1]
    if dy is None:
        return weights @ np.abs(v), length
    d_weights = np.abs(dy) @ np.swapaxes(np.abs(v), -1, -2)
    d_scores = abs(scale) * weights * (d_weights + np.sum(d_weights * weights, axis=-1, keepdims=True))
    products: dict[str, tuple[Any, Callable[[], Any]]] = {
        "_query": (q, lambda: d_scores @ np.abs(k)), "_key": (k, lambda: np.swapaxes(d_scores, -1, -2) @ np.abs(q)),
        "_value": (v, lambda: np.swapaxes(weights, -1, -2) @ np.abs(dy))}
    wrt, product = products[op[op.rindex("_"):]]
    full = product()
    summed = _reference("sum_to_shape", [full], {"shape": wrt.shape})
    return summed, length + full.size // max(summed.size, 1)


SPELLED_OUT: dict[str, Callable[[str, list[Any], dict[str, Any]], Scale]] = {
    **ACTIVATION_RULES,
    "sigmoid_grad": _sigmoid_grad,
    "rsqrt_grad": _rsqrt_grad,
    "tanh_grad": _tanh_grad,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "softmax_grad": _softmax_grad,
    "log_softmax_grad": _log_softmax_grad,
    "batchnorm2d": _batchnorm2d,
    "batchnorm2d_fused": _batchnorm2d,
    "interpolate": _interpolate,
    **{f"scaled_dot_product_attention{part}": _attention for part in ("", "_grad_query", "_grad_key", "_grad_value")},
    "interpolate_grad": _interpolate,
    "softmax_cross_entropy": _cross_entropy,
    "softmax_cross_entropy_grad": _cross_entropy_grad,
    "binary_cross_entropy": _binary_cross_entropy,
    "binary_cross_entropy_grad": _binary_cross_entropy_grad,
    **{f"{family}{part}": rule for family in ("layer_norm", "instance_norm", "batch_norm_train", "group_norm")
       for part, rule in (("", _norm_forward), ("_grad_input", _norm_grad_input), ("_grad_weight", _norm_grad_weight))},
}


def is_classified(op: str) -> bool:
    return op in SUMS or op in MEANS or op in ELEMENTWISE or op in SPELLED_OUT or _is_update(op)


def _is_update(op: str) -> bool:
    return bool(algoswap.registry().spec(op).in_place) if op in algoswap.registry().ops else False


def op_scale(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """(scale, reduction length) of ``op``'s result on ``inputs`` (float64 copies; integer and bool ones as
    they are); ``attrs`` as given to the op (defaults are filled in here). A scale of None means the result
    itself. Updates in place are scaled by ``update_scale``."""
    attrs = _bound_attrs(op, inputs, attrs)
    inputs = [_widened(a) for a in inputs]
    if op in SUMS:
        return _sum(op, inputs, attrs)
    if op in MEANS:
        return MEANS[op](op, inputs, attrs)
    if op in SPELLED_OUT:
        return SPELLED_OUT[op](op, inputs, attrs)
    if op in ELEMENTWISE:
        return None, 1
    raise KeyError(f"op {op!r} has no tolerance rule: add it to one of the tables in algoswap/testing/_scales.py")


def _widened(a: Any) -> Any:
    return a.astype(np.float64) if _is_float(a) else a


def gradient_scales(op: str, inputs: list[Any], attrs: dict[str, Any], grad_output: Any, output: Any) -> dict[str, Scale]:
    """(scale, reduction length) of the gradient of each input of ``op`` that has a rule, by the rule's op."""
    inputs = [None if a is None else as_float64(a) if hasattr(a, "detach") else a for a in inputs]
    spec = algoswap.registry().spec(op)
    call = spec.bind([getattr(a, "shape", None) for a in inputs], [None if a is None else str(a.dtype) for a in inputs], attrs)
    by_name = dict(zip(spec.input_names, inputs), grad_output=as_float64(grad_output), output=as_float64(output))
    return {rule.wrt: (None, 1) if rule.op is None else op_scale(rule.op, [by_name[n] for n in rule.inputs], rule.attrs(call))
            for rule in spec.gradients}


def _bound_attrs(op: str, inputs: list[Any], attrs: dict[str, Any]) -> dict[str, Any]:
    shapes = [getattr(a, "shape", None) for a in inputs]
    dtypes = [None if a is None else str(a.dtype) for a in inputs]
    return dict(algoswap.registry().spec(op).bind(shapes, dtypes, attrs).attrs)


def update_scale(before: Any, after: Any, steps: int = 1) -> Scale:
    """The scale of a value updated in place (parameters, optimizer state): |before| + |after - before|,
    the two terms of ``before + change``, where the change sums ``steps`` updates (or rows of a sparse
    gradient), each a few chained roundings."""
    before, after = as_float64(before), as_float64(after)
    return np.abs(before) + np.abs(after - before), steps + 4
