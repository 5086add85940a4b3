"""Max, average and adaptive average pooling and their gradients on oneDNN pooling primitives.

PyTorch's ceil_mode becomes extra right padding (oneDNN's output size rounds down). oneDNN's
include-padding average always divides by the window size; PyTorch's divisor stops at the
declared padding, and divisor_override replaces it: both are exact rescalings of the output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algoswap import pool_output_size

from ._ext import dnnl, refusal
from ._layout import from_memory_order, is_channels_last, to_memory_order

Pair = tuple[int, int]


def _window(size: tuple[int, ...], kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
            ceil_mode: bool) -> dict[str, Any]:
    """Keyword arguments of the primitive: right padding chosen so its output size is PyTorch's."""
    right = []
    for extent, k, s, p, d in zip(size[2:], kernel, stride, padding, dilation):
        out = pool_output_size(extent, k, s, p, d, ceil_mode)
        exact = (out - 1) * s + d * (k - 1) + 1 - extent - p  # any value up to exact + s - 1 gives `out`
        right.append(max(0, min(max(p, exact), exact + s - 1)))
    return {"kernel": list(kernel), "stride": list(stride), "dilation": list(dilation),
            "padding_l": list(padding), "padding_r": right}


def _include_pad_rescale(size: tuple[int, ...], kernel: Pair, stride: Pair, padding: Pair,
                         ceil_mode: bool) -> np.ndarray | None:
    """Factor turning oneDNN's window-size divisor into PyTorch's (None where they agree)."""
    factors = []
    for extent, k, s, p in zip(size[2:], kernel, stride, padding):
        start = np.arange(pool_output_size(extent, k, s, p, 1, ceil_mode)) * s - p
        factors.append(k / (np.minimum(start + k, extent + p) - start))
    if all((f == 1).all() for f in factors):
        return None
    return (factors[0][:, None] * factors[1][None, :]).astype(np.float32)


def _avg(size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
         count_include_pad: bool, divisor_override: int | None) -> tuple[dict[str, Any], float, np.ndarray | None]:
    """(primitive arguments, scale, rescale) of an average pooling."""
    kwargs = _window(size, kernel_size, stride, padding, (1, 1), ceil_mode)
    if divisor_override is not None:
        kwargs["kind"] = "avg_include"
        return kwargs, kernel_size[0] * kernel_size[1] / divisor_override, None
    if not count_include_pad:
        kwargs["kind"] = "avg_exclude"
        return kwargs, 1.0, None
    kwargs["kind"] = "avg_include"
    return kwargs, 1.0, _include_pad_rescale(size, kernel_size, stride, padding, ceil_mode)


def _forward(x: np.ndarray, **kwargs: Any) -> np.ndarray:
    """pool2d_forward on NCHW or channels-last ``x``; the output keeps its memory order."""
    channels_last = is_channels_last(x)
    y = dnnl.pool2d_forward(to_memory_order(x, channels_last), channels_last=channels_last, **kwargs)
    return from_memory_order(y, channels_last)


def maxpool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair,
              ceil_mode: bool) -> np.ndarray:
    kwargs = _window(x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    return _forward(x, kind="max", **kwargs)


def maxpool2d_grad(dy: np.ndarray, x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair,
                   dilation: Pair, ceil_mode: bool) -> np.ndarray:
    """Recomputes the forward pass (with its workspace of argmax positions), then backward."""
    kwargs = _window(x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    return dnnl.pool2d_backward(np.ascontiguousarray(dy), np.ascontiguousarray(x), list(x.shape), kind="max", **kwargs)


def avgpool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    kwargs, scale, rescale = _avg(x.shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    y = _forward(x, scale=scale, **kwargs)
    if rescale is not None:
        y *= rescale
    return y


def avgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    kwargs, scale, rescale = _avg(input_size, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if scale != 1.0:
        dy = dy * np.float32(scale)
    if rescale is not None:
        dy = dy * rescale
    return dnnl.pool2d_backward(np.ascontiguousarray(dy), None, list(input_size), **kwargs)


def _adaptive(size: tuple[int, ...], output_size: Pair) -> dict[str, Any]:
    kernel = (size[2] // output_size[0], size[3] // output_size[1])
    return {"kernel": list(kernel), "stride": list(kernel), "dilation": [1, 1], "padding_l": [0, 0],
            "padding_r": [0, 0], "kind": "avg_exclude"}


def adaptiveavgpool2d(x: np.ndarray, *, output_size: Pair) -> np.ndarray:
    """Only output sizes dividing the input size: then the windows are a plain average pooling."""
    return _forward(x, **_adaptive(x.shape, output_size))


def adaptiveavgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...]) -> np.ndarray:
    kwargs = _adaptive(tuple(input_size), (dy.shape[2], dy.shape[3]))
    return dnnl.pool2d_backward(np.ascontiguousarray(dy), None, list(input_size), **kwargs)


def _plan(call: Any) -> Any:
    a, op = call.attrs, call.op
    if op.startswith("adaptive"):
        size = call.shape("input") if op == "adaptiveavgpool2d" else a["input_size"]
        out = call.out_shape[2:] if op == "adaptiveavgpool2d" else call.shape("grad_output")[2:]
        kwargs = _adaptive(size, out)
        scale = 1.0
    elif op.startswith("max"):
        size = call.shape("input")
        kwargs = dict(_window(size, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"]), kind="max")
        scale = 1.0
    else:
        size = call.shape("input") if op == "avgpool2d" else a["input_size"]
        kwargs, scale, _ = _avg(size, a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
                                a["count_include_pad"], a["divisor_override"])
    if op.endswith("_grad"):
        return dnnl.pool2d_backward_impl(list(size), **kwargs)
    return dnnl.pool2d_forward_impl(list(size), scale=scale, dtype=call.dtype, **kwargs)


def supports(call: Any) -> bool | str:
    """oneDNN is asked: True if it makes the primitive for this call, else its refusal."""
    return refusal(lambda: _plan(call), call.dtype)


def supports_adaptive(call: Any) -> bool | str:
    size = call.shape("input") if call.op == "adaptiveavgpool2d" else call.attrs["input_size"]
    out = call.out_shape[2:] if call.op == "adaptiveavgpool2d" else call.shape("grad_output")[2:]
    if size[2] % out[0] or size[3] % out[1]:
        return f"adaptive windows overlap or differ in size: output size {tuple(out)} does not divide input size {tuple(size[2:])}"
    return supports(call)


def kernel(call: Any) -> str:
    return str(_plan(call).impl)
