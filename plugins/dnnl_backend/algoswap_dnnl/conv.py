"""conv2d and its gradients on oneDNN convolution primitives (NCHW / OIHW float32 arrays)."""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from ._layout import from_memory_order, is_channels_last, to_memory_order
from ._padding import NO_PADDING, PadHW, fold, pad, padded_size

Pair = tuple[int, int]

def layout() -> str:
    """ALGOSWAP_DNNL_LAYOUT, read at each call: "auto" (per primitive, oneDNN's blocked layouts,
    reordered per call, or plain NCHW, whichever measured faster when the primitive was made),
    "plain" or "any" (forced)."""
    return os.environ.get("ALGOSWAP_DNNL_LAYOUT", "auto")


def _geometry(size: tuple[int, ...], padding: PadHW, mode: str, stride: Pair, dilation: Pair,
              groups: int) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The input size the primitive sees (padded here unless zeros) and its keyword arguments."""
    if mode != "zeros":
        size, padding = padded_size(size, padding), NO_PADDING
    (top, bottom), (left, right) = padding
    return size, {"stride": list(stride), "padding_l": [top, left], "padding_r": [bottom, right],
                  "dilation": list(dilation), "groups": groups, "layout": layout()}


# Constant weights reordered once. Read-only weight arrays are taken as constant (swap_backend makes
# the model's weights read-only and keeps them alive); writeable ones are reordered at every call.
# (id(weight), primitive) -> (weak reference to the weight, its PackedWeights, or None when the
# primitive reads the plain weight). An entry is used only while its reference still leads to the
# same array (an id may be reused after garbage collection) and dropped when that array dies.
_packed: dict[tuple[Any, ...], tuple[weakref.ref[np.ndarray], Any]] = {}


def _drop_packed(key: tuple[Any, ...], ref: weakref.ref[np.ndarray]) -> None:
    entry = _packed.get(key)
    if entry is not None and entry[0] is ref:
        _packed.pop(key, None)


def _packed_weight(x: np.ndarray, w: np.ndarray, fusion: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """The PackedWeights of read-only ``w`` for this primitive (made at the first call), or None.

    ``x`` is the array the extension reads (NHWC if channels-last); ``fusion`` has bias and residual
    (whether present), activation and channels_last."""
    key = (id(w), x.shape, w.shape, *fusion.values(), *(tuple(v) if isinstance(v, list) else v for v in kwargs.values()))
    entry = _packed.get(key)
    if entry is not None and entry[0]() is w:
        return entry[1]
    size = [x.shape[i] for i in (0, 3, 1, 2)] if kwargs["channels_last"] else list(x.shape)
    packed = dnnl.conv2d_pack_weights(size, w, **fusion, **kwargs)
    _packed[key] = (weakref.ref(w, lambda ref, key=key: _drop_packed(key, ref)), packed)
    return packed


def packed_weights_count() -> int:
    """How many (weight, primitive) pairs have their reordered weights cached (None entries included)."""
    return len(_packed)


def packed_weights_clear() -> None:
    """Forget every cached reordered weight."""
    _packed.clear()


def _forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, activation: str,
             algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
             padding_mode: str) -> np.ndarray:
    """activation(conv2d + bias + residual); a channels-last input gives a channels-last output."""
    _, kwargs = _geometry(x.shape, padding, padding_mode, stride, dilation, groups)
    channels_last = is_channels_last(x)
    if padding_mode != "zeros":
        x = pad(x, padding, padding_mode)
    src = to_memory_order(x, channels_last)
    res = None if residual is None else to_memory_order(residual, channels_last)
    bias = None if b is None else np.ascontiguousarray(b)
    w = np.ascontiguousarray(w)
    kwargs.update(algorithm=algorithm, activation=activation, channels_last=channels_last)
    if not w.flags.writeable and w.dtype.name in ("float32", "bfloat16") and w.ndim == 4 and x.ndim == 4:
        fusion = {"bias": bias is not None, "residual": res is not None}
        packed = _packed_weight(src, w, fusion, kwargs)
        if packed is not None:
            return from_memory_order(dnnl.conv2d_forward_packed(src, packed, bias, res, **kwargs), channels_last)
    return from_memory_order(dnnl.conv2d_forward(src, w, bias, res, **kwargs), channels_last)


def conv2d_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair, padding: PadHW,
                  dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution_direct."""
    return _forward(x, w, b, None, "none", "direct", stride, padding, dilation, groups, padding_mode)


def conv2d_auto(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair, padding: PadHW,
                dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution_auto: the library picks the algorithm."""
    return _forward(x, w, b, None, "none", "auto", stride, padding, dilation, groups, padding_mode)


def conv2d_fused_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, *,
                        activation: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
                        padding_mode: str) -> np.ndarray:
    """convolution_direct with the residual add (binary_add) and relu (eltwise) as post-ops."""
    return _forward(x, w, b, residual, activation, "direct", stride, padding, dilation, groups, padding_mode)


def conv2d_fused_auto(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, *,
                      activation: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
                      padding_mode: str) -> np.ndarray:
    """convolution_auto with the residual add and relu as post-ops."""
    return _forward(x, w, b, residual, activation, "auto", stride, padding, dilation, groups, padding_mode)


def conv2d_grad_input(dy: np.ndarray, w: np.ndarray, *, input_size: tuple[int, ...], stride: Pair, padding: PadHW,
                      dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution backward data (the padding adjoint folded in NumPy for non-zero modes)."""
    size, kwargs = _geometry(tuple(input_size), padding, padding_mode, stride, dilation, groups)
    dx = dnnl.conv2d_backward_data(np.ascontiguousarray(dy), np.ascontiguousarray(w), list(size), **kwargs)
    return dx if padding_mode == "zeros" else fold(dx, tuple(input_size[2:]), padding, padding_mode)  # type: ignore[arg-type]


def conv2d_grad_weight(dy: np.ndarray, x: np.ndarray, *, weight_size: tuple[int, ...], stride: Pair,
                       padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution backward weights."""
    _, kwargs = _geometry(x.shape, padding, padding_mode, stride, dilation, groups)
    if padding_mode != "zeros":
        x = pad(x, padding, padding_mode)
    return dnnl.conv2d_backward_weights(np.ascontiguousarray(dy), np.ascontiguousarray(x), list(weight_size), **kwargs)


def conv2d_grad_bias(dy: np.ndarray) -> np.ndarray:
    """NumPy sum over N, H and W: oneDNN 3.2's reduction runs its reference kernel here (~100x slower)."""
    total: np.ndarray = dy.sum(axis=(0, 2, 3))
    return total


def _plan(call: Any, algorithm: str = "direct") -> Any:
    """The extension's PlanInfo of the primitive serving ``call`` (made and cached now)."""
    a = call.attrs
    if call.op in ("conv2d", "conv2d_fused"):
        size, kwargs = _geometry(call.shape("input"), a["padding"], a["padding_mode"], a["stride"], a["dilation"], a["groups"])
        fused = call.op == "conv2d_fused"
        residual = fused and call.shape("residual") is not None
        return dnnl.conv2d_forward_impl(list(size), list(call.shape("weight")), call.shape("bias") is not None, residual,
                                         algorithm=algorithm, activation=a["activation"] if fused else "none",
                                         channels_last=True, dtype=call.dtype, **kwargs)  # what swap_backend models run
    if call.op == "conv2d_grad_input":
        size, kwargs = _geometry(a["input_size"], a["padding"], a["padding_mode"], a["stride"], a["dilation"], a["groups"])
        return dnnl.conv2d_backward_data_impl(list(size), list(call.shape("weight")), algorithm=algorithm, **kwargs)
    if call.op == "conv2d_grad_weight":
        size, kwargs = _geometry(call.shape("input"), a["padding"], a["padding_mode"], a["stride"], a["dilation"], a["groups"])
        return dnnl.conv2d_backward_weights_impl(list(size), list(a["weight_size"]), algorithm=algorithm, **kwargs)
    raise ValueError(f"no oneDNN primitive serves {call.op}")


def supports(call: Any, algorithm: str = "direct") -> bool | str:
    """oneDNN is asked: True if it makes the primitive for this call, else its refusal."""
    return refusal(lambda: _plan(call, algorithm), call.dtype)


def supports_auto(call: Any) -> bool | str:
    return supports(call, "auto")


def kernel(call: Any, algorithm: str = "direct") -> str:
    info = _plan(call, algorithm)
    return f"{info.impl} ({info.layout} layout)"


def kernel_auto(call: Any) -> str:
    return kernel(call, "auto")
