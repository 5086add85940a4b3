"""Element-wise ops that keep a channels-last input's memory order (registered with layout "any": a half-precision
model's NHWC activations reach them from the convolutions and go on to the next convolution without a copy).

A unary op (``keeps_order``) runs on the NHWC memory of a channels-last input, a C-contiguous (N, H, W, C) view,
and its result is viewed back as (N, C, H, W): channels-last, no copy either way. A binary op (``binary``) whose
result has the shape of a channels-last operand runs the same way on both operands' NHWC views (CuPy's
element-wise kernel; a same-shape operand in NHWC memory too is read along memory), except a per-(image, channel)
operand such as squeeze-and-excitation's scale s (N, C, 1, 1) in x * s: one raw kernel, a thread per 16 bytes of
channels of x, reading s[n, c] for them. Other inputs go to the op as they are (CuPy broadcasting, C-contiguous
result), as before."""

from __future__ import annotations

import functools
import operator
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from algoswap import is_channels_last

from . import _kernels, _runtime
from ._runtime import dtype_name

OPERATORS: dict[str, Callable[[Any, Any], Any]] = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                                                   "div": operator.truediv}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}

# y = x op s (or s op x) in NHWC memory, s per (image, channel): s[n * sn + c * sc]. One thread per LANES channels of
# one pixel: y[index * LANES ...].
CHANNEL = r"""
extern "C" __global__ void NAME(const S* x, const S* s, S* y, long long groups_total, int c, long long image,
        long long sn, long long sc) {
    const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= groups_total) return;
    const long long first = index * LANES, n = first / image;
    const int channel = (int)(first % c);
    T v[LANES];
    load_lanes(x + first, v);
    for (int k = 0; k < LANES; ++k) {
        const T p = v[k], q = (T)s[n * sn + (channel + k) * sc];
        v[k] = EXPRESSION;
    }
    store_lanes(v, y + first);
}
"""


def keeps_order(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (an element-wise op of its first argument) on a channels-last input's NHWC memory, its result
    channels-last; any other input as it is."""
    @functools.wraps(function)
    def in_memory_order(x: Any, *args: Any, **attrs: Any) -> Any:
        if is_channels_last(x):
            return function(x.transpose(0, 2, 3, 1), *args, **attrs).transpose(0, 3, 1, 2)
        return function(x, *args, **attrs)

    return in_memory_order


def channel_source(op: str, x_first: bool, lanes: int) -> tuple[str, str]:
    """The per-(image, channel) kernel of ``op`` (x op s where ``x_first``, else s op x), and its name."""
    name = f"algoswap_channel_{op}{'' if x_first else '_reversed'}_{lanes}"
    expression = f"p {_SYMBOLS[op]} q" if x_first else f"q {_SYMBOLS[op]} p"
    return _kernels.lanes_io(lanes) + CHANNEL.replace("NAME", name).replace("EXPRESSION", expression), name


def _four_d(array: Any) -> Any:
    return array.reshape((1,) * (4 - array.ndim) + array.shape)


def _ordered_operand(a: Any, b: Any) -> Any:
    """The channels-last operand whose shape the result has (``a`` first), else None."""
    if max(a.ndim, b.ndim) != 4 or a.dtype != b.dtype:
        return None
    shape = np.broadcast_shapes(a.shape, b.shape)
    for operand in (a, b):
        if operand.shape == shape and is_channels_last(operand):
            return operand
    return None


def binary(op: str, a: Any, b: Any) -> Any:
    """a op b with CuPy's broadcasting; in a channels-last operand's memory order where the result has its shape."""
    x = _ordered_operand(a, b)
    if x is None:
        return OPERATORS[op](a, b)
    other = _four_d(b if x is a else a)
    if other.shape[2:] == (1, 1) and other.shape[0] in (1, x.shape[0]) and other.shape[1] in (1, x.shape[1]):
        return _per_channel(op, x, other, x is a)
    views = [_four_d(t).transpose(0, 2, 3, 1) for t in (a, b)]
    return OPERATORS[op](*views).transpose(0, 3, 1, 2)


@lru_cache(maxsize=64)
def _channel_kernel(op: str, x_first: bool, lanes: int, dtype: str) -> Any:
    return _kernels.kernel(*channel_source(op, x_first, lanes), dtype)


def _per_channel(op: str, x: Any, s: Any, x_first: bool) -> Any:
    """x op s (or s op x) for a channels-last x (N, C, H, W) and s of shape (N or 1, C or 1, 1, 1)."""
    n, c, h, w = x.shape
    s = _runtime.contiguous(s)
    y = _runtime.empty(x.shape, x.dtype, True)
    if not y.size:
        return y
    memory = (x.transpose(0, 2, 3, 1), y.transpose(0, 2, 3, 1))
    lanes = _kernels.lanes(c, *memory)
    count = y.size // lanes
    kernel = _channel_kernel(op, x_first, lanes, dtype_name(x.dtype))
    sn, sc = (s.shape[1] if s.shape[0] > 1 else 0), (1 if s.shape[1] > 1 else 0)
    blocks = -(-count // _kernels.BLOCK)
    kernel((blocks,), (_kernels.BLOCK,), (memory[0], s, memory[1], np.int64(count), np.int32(c), np.int64(h * w * c),
                                          np.int64(sn), np.int64(sc)))
    return y

