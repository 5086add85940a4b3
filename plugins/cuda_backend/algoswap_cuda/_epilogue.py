"""What follows a convolution, applied in place on its output in one pass over memory (NCHW or NHWC): the
bias per channel, a residual, an activation (relu, relu6, silu, hardswish or gelu: conv2d_fused's). For plain
float32, cuDNN 9 builds no engine for a convolution graph with these as pointwise nodes: its fusion
engines compute in TF32 (measured on the H200, cuDNN 9.19: relative error 1e-4 to 3e-4 against
float64), and none takes a residual in NCHW.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._runtime import C_TYPES, INCLUDES, channels_last, contiguous, dtype_name
from .activation import FORWARD

# conv2d_fused's activation -> the C statements applying it to T v (activation.FORWARD's, relu6 as hardtanh(0, 6))
ACTIVATIONS = {"none": "", "relu": FORWARD["relu"], "relu6": "{ const T lo = 0, hi = 6; " + FORWARD["hardtanh"] + " }",
               "silu": FORWARD["silu"], "hardswish": FORWARD["hardswish"], "gelu": FORWARD["gelu"]}


_SOURCE = """{includes}typedef {storage} S;
typedef {compute} T;
extern "C" __global__ void {name}(S* y, const S* b, const S* r, long long n, long long plane, int channels) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {{
        T v = (T)y[i];
        {body}
        y[i] = (S)v;
    }}
}}
"""
_THREADS, _MOST_BLOCKS = 256, 8192  # a grid-stride loop: more blocks than the H200 runs at once


@lru_cache(maxsize=128)  # every (dtype, channels last, bias, residual, activation)
def _kernel(dtype: str, channels_last: bool, bias: bool, residual: bool, activation: str) -> Any:
    """A raw kernel: launched with a fraction of an ElementwiseKernel's per-call host cost (no argument
    type dispatch or broadcasting), which is most of what a convolution's epilogue costs. Stored as
    ``dtype``, computed in float32 for the half precisions."""
    channel = "i % channels" if channels_last else "(i / plane) % channels"
    body = (f"v += (T)b[{channel}]; " if bias else "") + ("v += (T)r[i]; " if residual else "") + ACTIVATIONS[activation]
    name = f"algoswap_epilogue_{dtype}{'_nhwc' * channels_last}{'_bias' * bias}{'_residual' * residual}_{activation}"
    storage, compute = C_TYPES[dtype]
    return cp.RawKernel(_SOURCE.format(includes=INCLUDES, storage=storage, compute=compute, name=name, body=body), name)


def apply(y: Any, bias: Any = None, residual: Any = None, activation: str = "none") -> Any:
    """y (N, C, H, W), dense in NCHW or NHWC memory order, becomes activation(y + bias[c] + residual) in
    place; returned. The residual is read in y's memory order (copied into it first if it has another)."""
    if (bias is None and residual is None and activation == "none") or y.size == 0:
        return y
    channels_last = not y.flags.c_contiguous
    if residual is not None and residual.strides != y.strides:
        residual = same_order(residual, y)
    kernel = _kernel(dtype_name(y.dtype), channels_last, bias is not None, residual is not None, activation)
    blocks = min(-(-y.size // _THREADS), _MOST_BLOCKS)
    kernel((blocks,), (_THREADS,), (y, y if bias is None else bias, y if residual is None else residual,
                                    np.int64(y.size), np.int64(y.shape[2] * y.shape[3]), np.int32(y.shape[1])))
    return y


def same_order(array: Any, like: Any) -> Any:
    """``array`` (of ``like``'s shape) in ``like``'s memory order: NCHW or NHWC."""
    return contiguous(array) if like.flags.c_contiguous else channels_last(array)


def parts(call: Any) -> list[str]:
    """What a conv2d or conv2d_fused call computes after the convolution, in words ("+ bias", "+ residual", the
    activation)."""
    residual = "residual" in call.input_names and call.shape("residual") is not None
    found = ["+ bias"] * (call.shape("bias") is not None) + ["+ residual"] * residual
    activation = call.attrs.get("activation", "none")
    return found + [activation] * (activation != "none")


def label(call: Any) -> str:
    """The epilogue a conv2d or conv2d_fused call runs, in words."""
    found = parts(call)
    return f"then {', '.join(found)} in one CuPy element-wise pass" if found else "nothing after it"
