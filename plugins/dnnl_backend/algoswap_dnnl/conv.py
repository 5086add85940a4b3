"""conv2d and its gradients on oneDNN convolution primitives (NCHW / OIHW float32 arrays)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from algoswap import FUSED_ACTIVATIONS, ConvGeometry, LRUCache, conv_geometry, declare_cache, is_frozen

from . import activation as activations
from ._derived import Derived
from ._ext import dnnl, refusal
from ._layout import from_memory_order, to_memory_order
from ._padding import PadHW, fold, pad
from ._settings import conv_layout

Pair = tuple[int, int]

def _primitive_args(g: ConvGeometry, mode: str) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The input size the primitive sees (padded here first unless ``mode`` is "zeros") and its keyword arguments."""
    if mode != "zeros":
        g = g.padded_first()
    (top, bottom), (left, right) = g.padding
    return g.input, {"stride": list(g.stride), "padding_l": [top, left], "padding_r": [bottom, right],
                     "dilation": list(g.dilation), "groups": g.groups, "layout": conv_layout()}


# Frozen weights (algoswap.is_frozen: nothing can write them; swap_backend Models freeze theirs) are
# reordered once per packed layout and the copy kept while the weight lives; any other weight is
# reordered at every call. Input shapes whose primitives read the weight in one layout share one copy.
CALLS = declare_cache(
    "dnnl_conv_calls", 2048,
    "oneDNN conv2d: what the forward primitive of each call signature (input and weight shapes, attributes, fusion, "
    "dtype, layout setting) is given: its positional arguments, and the packed layout it reads the weights in")
PACKED = declare_cache(
    "dnnl_packed_weights", 256,
    "oneDNN conv2d: frozen weights reordered into a primitive's layout, one copy per (weight, layout), shared by "
    "every input shape whose primitive reads that layout; an entry goes when its weight dies")
FINITE = declare_cache(
    "dnnl_finite_weights", 1024,
    "oneDNN conv2d: the largest magnitude of each frozen weight and bias (inf if one is not finite: such a weight "
    "takes the explicitly padded path; a fused relu whose sums cannot overflow runs a cheaper post-op)")
# the largest finite values, less the rounding of the sum to the output dtype
LARGEST = {"float32": float(np.finfo(np.float32).max) * (1 - 2.0**-23), "bfloat16": 3.38e38}
# Output elements from which a fused relu checks for finite sums. The check costs about 2 us and 0.035 ns an
# input element; the NaN-keeping relu's exp 0.1 to 0.45 ns an output (89 us on MobileNet's stride-2 depthwise
# layer 64x112x112, where a read of its input takes 28 us; 2.4 us on 16->64 1x1 over 15x15; 38 us on 3->64 3x3
# over 64x64).
FINITE_RELU_FROM = 1 << 14
_packed = Derived(PACKED)  # (weight, layout text) -> its PackedWeights
_finite = Derived(FINITE)  # weight -> max |element| (inf if one is not finite)


class ConvCall:
    """What the extension's forward convolution is given for one call signature, derived once: the input size the
    primitive sees (NCHW, padded here first unless the mode is "zeros"), its arguments after the arrays (in the
    order of ``conv2d_forward``), and the packed layout it reads the weights in (asked of oneDNN at the first call
    with a frozen weight; "" when it reads the plain weight)."""

    __slots__ = ("size", "weight_size", "args", "bias", "residual", "dtype", "_weights_layout")

    def __init__(self, x_shape: tuple[int, ...], w_shape: tuple[int, ...], bias: bool, residual: bool, activation: str,
                 algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int, padding_mode: str,
                 channels_last: bool, dtype: str) -> None:
        g = conv_geometry(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation, groups=groups)
        size, kwargs = _primitive_args(g, padding_mode)
        self.size, self.weight_size = list(size), list(w_shape)
        self.args = (kwargs["stride"], kwargs["padding_l"], kwargs["padding_r"], kwargs["dilation"], kwargs["groups"],
                     algorithm, kwargs["layout"], activation, channels_last)
        self.bias, self.residual, self.dtype = bias, residual, dtype
        self._weights_layout: str | None = None

    def weights_layout(self) -> str:
        if self._weights_layout is None:
            self._weights_layout = dnnl.conv2d_weights_layout(self.size, self.weight_size, self.bias, self.residual,
                                                              *self.args, dtype=self.dtype)
        return self._weights_layout

    def packed(self, w: np.ndarray) -> Any:
        """The PackedWeights of frozen ``w`` in the layout this primitive reads (made once), or None when it reads
        the plain weight."""
        layout = self.weights_layout()
        if not layout:
            return None
        return _packed.get(w, layout, lambda: dnnl.conv2d_pack_weights(self.size, w, self.bias, self.residual,
                                                                         *self.args))


_calls: LRUCache[ConvCall] = LRUCache(CALLS)  # call signature -> its ConvCall


def _conv_call(x: np.ndarray, w: np.ndarray, bias: bool, residual: bool, activation: str, algorithm: str, stride: Pair,
               padding: PadHW, dilation: Pair, groups: int, padding_mode: str, channels_last: bool) -> ConvCall:
    """The ConvCall of this signature (``x`` as given, NCHW-shaped, before any padding here), made at its first call."""
    key = (x.shape, w.shape, w.dtype, bias, residual, activation, algorithm, stride, padding, dilation, groups,
           padding_mode, channels_last, conv_layout())
    call: ConvCall | None = _calls.get(key)
    if call is None:
        call = _calls.put(key, ConvCall(x.shape, w.shape, bias, residual, activation, algorithm, stride, padding,
                                        dilation, groups, padding_mode, channels_last, _dtype_name(w)))
    return call


def _all_finite(w: np.ndarray) -> bool:
    """Whether every element of C-contiguous ``w`` is finite (remembered for frozen arrays)."""
    return _max_magnitude(w) != math.inf


def _max_magnitude(a: np.ndarray) -> float:
    """max |a| of C-contiguous ``a`` (inf if an element is NaN or infinite; remembered for frozen arrays)."""
    if is_frozen(a):
        return float(_finite.get(a, "max", lambda: dnnl.max_magnitude(a)))
    return float(dnnl.max_magnitude(a))


# conv2d_fused's activations whose oneDNN post-op is exact only where every sum is finite -> the largest sum
# (a fraction of the dtype's largest value) it takes: gelu_erf overflows from 1.7e38 on
FINITE_ONLY = {"relu": 1.0, "relu6": 1.0, "gelu": 0.5}
# conv2d_fused's activation -> the post-op swap_backend models normally run (sums known to be finite)
POST_OPS = {"relu6": "relu6_finite", "gelu": "gelu_finite"}


def _post_op(activation: str, out_size: int, x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
             residual: np.ndarray | None) -> str | None:
    """The post-op (the extension's activation name) giving PyTorch's result, or None where the activation must
    run after the convolution. relu, relu6 and gelu take oneDNN's cheaper clip, clip_v2 and gelu_erf ("*_finite")
    where no sum can be NaN or too large: every input finite and terms * max|x| * max|w| + max|b| + max|residual|
    below the bound, so that no product or sum overflows. Otherwise relu keeps NaN with its exact post-ops, and
    relu6 and gelu run after. Small outputs keep the exact relu: there the check's calls cost more than the post-op's
    exp saves."""
    if activation not in FINITE_ONLY or (activation == "relu" and out_size < FINITE_RELU_FROM):
        return activation
    bound = w.size // w.shape[0] * _max_magnitude(x) * _max_magnitude(w)  # NaN for 0 * inf: not below, as wanted
    if b is not None:
        bound += _max_magnitude(b)
    if residual is not None:
        bound += _max_magnitude(residual)
    if bound < LARGEST[_dtype_name(w)] * FINITE_ONLY[activation]:
        return f"{activation}_finite"
    return "relu" if activation == "relu" else None


def _activated(y: np.ndarray, activation: str) -> np.ndarray:
    """``activation`` applied to a convolution's output by this backend's eltwise op (in its memory order)."""
    op, attrs = FUSED_ACTIVATIONS[activation]
    out: np.ndarray = getattr(activations, op)(y, **attrs)
    return out


def _is_bfloat16(a: np.ndarray) -> bool:
    return a.dtype.char != "f" and a.dtype.name == "bfloat16"  # .char first: .name is a Python-level property


def _dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if _is_bfloat16(a) else "float32"


def packed_weights_count() -> int:
    """How many reordered copies of frozen weights are kept (one per weight and packed layout)."""
    return len(_packed)


def conv_calls_count() -> int:
    """How many call signatures have their primitive's arguments kept (a ConvCall each)."""
    return len(_calls)


def packed_weights_clear() -> None:
    """Forget every cached reordered weight (and each call signature's arguments, with the layout its weights are
    read in)."""
    _packed.clear()
    _calls.clear()
    _finite.clear()


def _padded_here(padding: PadHW, padding_mode: str, factor: np.ndarray) -> str:
    """The padding mode to apply in NumPy before the primitive ("zeros": none, the primitive pads).

    oneDNN's kernels skip the taps that fall in zero padding; PyTorch multiplies those zeros, so a NaN or
    infinite ``factor`` (the weight, or grad_output for the weight's gradient) makes NaN there too. Such
    calls pad explicitly ("zeros_here"): the primitive then multiplies the zeros as PyTorch does."""
    (top, bottom), (left, right) = padding
    if padding_mode != "zeros" or not (top or bottom or left or right) or _all_finite(factor):
        return padding_mode
    return "zeros_here"


def _forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, activation: str,
             algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
             padding_mode: str) -> np.ndarray:
    """activation(conv2d + bias + residual) in channels-last memory order, the order the core gives
    ``x`` and ``residual`` in (``layout="channels_last"``; another order is copied into it). A
    bfloat16 call with a residual runs in NCHW order: oneDNN 3.2 adds an NHWC bfloat16 residual wrongly
    where a group has few input channels (up to 8; relative errors of 0.2-0.4 measured)."""
    w = np.ascontiguousarray(w)
    if _is_bfloat16(w) and not (_all_finite(w) and _all_finite(to_memory_order(x, True))):
        return _in_float32(x, w, b, residual, activation, algorithm, stride, padding, dilation, groups, padding_mode)
    channels_last = residual is None or not _is_bfloat16(w)
    padding_mode = _padded_here(padding, padding_mode, w)
    unpadded = x
    if padding_mode != "zeros":
        x = pad(x, padding, padding_mode)
    src = to_memory_order(x, channels_last)
    res = None if residual is None else to_memory_order(residual, channels_last)
    bias = None if b is None else np.ascontiguousarray(b)
    out_size = x.size // max(x.shape[1], 1) * w.shape[0] // (stride[0] * stride[1])  # about
    post_op = _post_op(activation, out_size, src, w, bias, res)
    call = _conv_call(unpadded, w, bias is not None, res is not None, post_op or "none", algorithm, stride, padding,
                      dilation, groups, padding_mode, channels_last)
    y = from_memory_order(_primitive(src, w, bias, res, call), channels_last)
    return y if post_op is not None else _activated(y, activation)


def _primitive(src: np.ndarray, w: np.ndarray, bias: np.ndarray | None, res: np.ndarray | None,
               call: ConvCall) -> np.ndarray:
    """The extension's convolution on arrays in its memory order, with frozen weights packed once."""
    if is_frozen(w) and (w.dtype.char == "f" or _is_bfloat16(w)) and w.ndim == 4 and src.ndim == 4:
        packed = call.packed(w)
        if packed is not None:
            return dnnl.conv2d_forward_packed(src, packed, bias, res, *call.args)
    return dnnl.conv2d_forward(src, w, bias, res, *call.args)


def _in_float32(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, *args: Any) -> np.ndarray:
    """The bfloat16 convolution computed in float32 (as oneDNN accumulates it anyway) and rounded back: where an
    input or weight is not finite. oneDNN's bfloat16 kernels multiply in channel pairs padded with zeros, so an
    infinity there meets a 0 and makes NaN where PyTorch has the infinity."""
    def wide(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a.astype(np.float32)

    out = _forward(wide(x), wide(w), wide(b), wide(residual), *args)  # type: ignore[arg-type]
    return out.astype(x.dtype)


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
    """convolution_direct with the residual add (binary_add) and the activation (eltwise) as post-ops."""
    return _forward(x, w, b, residual, activation, "direct", stride, padding, dilation, groups, padding_mode)


def conv2d_fused_auto(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, *,
                      activation: str, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
                      padding_mode: str) -> np.ndarray:
    """convolution_auto with the residual add and the activation as post-ops."""
    return _forward(x, w, b, residual, activation, "auto", stride, padding, dilation, groups, padding_mode)


def conv2d_grad_input(dy: np.ndarray, w: np.ndarray, *, input_size: tuple[int, ...], stride: Pair, padding: PadHW,
                      dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution backward data (the padding adjoint folded in NumPy for non-zero modes)."""
    geometry = conv_geometry(input_size, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups)
    size, kwargs = _primitive_args(geometry, padding_mode)
    dx = dnnl.conv2d_backward_data(np.ascontiguousarray(dy), np.ascontiguousarray(w), list(size), **kwargs)
    return dx if padding_mode == "zeros" else fold(dx, tuple(input_size[2:]), padding, padding_mode)  # type: ignore[arg-type]


def conv2d_grad_weight(dy: np.ndarray, x: np.ndarray, *, weight_size: tuple[int, ...], stride: Pair,
                       padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """oneDNN convolution backward weights."""
    dy = np.ascontiguousarray(dy)
    padding_mode = _padded_here(padding, padding_mode, dy)
    geometry = conv_geometry(x.shape, weight_size, stride=stride, padding=padding, dilation=dilation, groups=groups)
    _, kwargs = _primitive_args(geometry, padding_mode)
    if padding_mode != "zeros":
        x = pad(x, padding, padding_mode)
    return dnnl.conv2d_backward_weights(dy, np.ascontiguousarray(x), list(weight_size), **kwargs)


def conv2d_grad_bias(dy: np.ndarray) -> np.ndarray:
    """NumPy sum over N, H and W: oneDNN 3.2's reduction runs its reference kernel here (~100x slower)."""
    total: np.ndarray = dy.sum(axis=(0, 2, 3))
    return total


def _plan(call: Any, algorithm: str = "direct") -> Any:
    """The extension's PlanInfo of the primitive serving ``call`` (made and cached now)."""
    a = call.attrs
    if call.geometry is None:
        raise ValueError(f"no oneDNN primitive serves {call.op}")
    size, kwargs = _primitive_args(call.geometry, a["padding_mode"])
    if call.op in ("conv2d", "conv2d_fused"):
        fused = call.op == "conv2d_fused"
        residual = fused and call.shape("residual") is not None
        activation = POST_OPS.get(a["activation"], a["activation"]) if fused else "none"
        return dnnl.conv2d_forward_impl(list(size), list(call.shape("weight")), call.shape("bias") is not None, residual,
                                         algorithm=algorithm, activation=activation,
                                         channels_last=True, dtype=call.dtype, **kwargs)  # what swap_backend models run
    if call.op == "conv2d_grad_input":
        return dnnl.conv2d_backward_data_impl(list(size), list(call.shape("weight")), algorithm=algorithm, **kwargs)
    return dnnl.conv2d_backward_weights_impl(list(size), list(a["weight_size"]), algorithm=algorithm, **kwargs)


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
