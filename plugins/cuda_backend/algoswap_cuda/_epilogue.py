"""What follows a convolution, applied in place on its output in one pass over memory: the bias per
channel, a residual, an activation (relu, relu6, silu, hardswish or gelu: conv2d_fused's). For plain
float32, cuDNN 9 builds no engine for a convolution graph with these as pointwise nodes: its fusion
engines compute in TF32 (measured on the H200, cuDNN 9.19: relative error 1e-4 to 3e-4 against
float64), and none takes a residual in NCHW.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from .activation import FORWARD

# conv2d_fused's activation -> the C statements applying it to T v (activation.FORWARD's, relu6 as hardtanh(0, 6))
ACTIVATIONS = {"none": "", "relu": FORWARD["relu"], "relu6": "{ const T lo = 0, hi = 6; " + FORWARD["hardtanh"] + " }",
               "silu": FORWARD["silu"], "hardswish": FORWARD["hardswish"], "gelu": FORWARD["gelu"]}


_SOURCE = """typedef {ctype} T;
extern "C" __global__ void {name}(T* y, const T* b, const T* r, long long n, long long plane, int channels) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {{
        T v = y[i];
        {body}
        y[i] = v;
    }}
}}
"""
_C_TYPES = {"float32": "float", "float64": "double"}
_THREADS, _MOST_BLOCKS = 256, 8192  # a grid-stride loop: more blocks than the H200 runs at once


@lru_cache(maxsize=64)  # every (dtype, bias, residual, activation)
def _kernel(dtype: str, bias: bool, residual: bool, activation: str) -> Any:
    """A raw kernel: launched with a fraction of an ElementwiseKernel's per-call host cost (no argument
    type dispatch or broadcasting), which is most of what a convolution's epilogue costs."""
    body = ("v += b[(i / plane) % channels]; " if bias else "") + ("v += r[i]; " if residual else "") + ACTIVATIONS[activation]
    name = f"algoswap_epilogue_{dtype}{'_bias' * bias}{'_residual' * residual}_{activation}"
    return cp.RawKernel(_SOURCE.format(ctype=_C_TYPES[dtype], name=name, body=body), name)


def apply(y: Any, bias: Any = None, residual: Any = None, activation: str = "none") -> Any:
    """y (N, C, H, W), C-contiguous, becomes activation(y + bias[c] + residual) in place; returned."""
    if (bias is None and residual is None and activation == "none") or y.size == 0:
        return y
    if residual is not None and not residual.flags.c_contiguous:
        residual = cp.ascontiguousarray(residual)
    kernel = _kernel(y.dtype.name, bias is not None, residual is not None, activation)
    blocks = min(-(-y.size // _THREADS), _MOST_BLOCKS)
    kernel((blocks,), (_THREADS,), (y, y if bias is None else bias, y if residual is None else residual,
                                    np.int64(y.size), np.int64(y.shape[2] * y.shape[3]), np.int32(y.shape[1])))
    return y


def label(call: Any) -> str:
    """The epilogue a conv2d_fused call runs, in words."""
    parts = (["+ bias"] if call.shape("bias") is not None else []) + (["+ residual"] if call.shape("residual") is not None else [])
    activation = call.attrs.get("activation", "none")
    parts += [activation] if activation != "none" else []
    return f"then {', '.join(parts)} in one CuPy element-wise pass" if parts else "nothing after it"
