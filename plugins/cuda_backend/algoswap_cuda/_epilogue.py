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

from .activation import FORWARD

# conv2d_fused's activation -> the C statements applying it to T v (activation.FORWARD's, relu6 as hardtanh(0, 6))
ACTIVATIONS = {"none": "", "relu": FORWARD["relu"], "relu6": "{ const T lo = 0, hi = 6; " + FORWARD["hardtanh"] + " }",
               "silu": FORWARD["silu"], "hardswish": FORWARD["hardswish"], "gelu": FORWARD["gelu"]}


@lru_cache(maxsize=32)  # every (bias, residual, activation)
def _kernel(bias: bool, residual: bool, activation: str) -> Any:
    inputs = (["raw T b"] if bias else []) + (["T r"] if residual else []) + ["int32 plane", "int32 channels"]
    body = "T v = y;"
    if bias:
        body += " v += b[(i / plane) % channels];"
    if residual:
        body += " v += r;"
    body += " " + ACTIVATIONS[activation]
    name = f"algoswap_epilogue{'_bias' * bias}{'_residual' * residual}_{activation}"
    return cp.ElementwiseKernel(", ".join(inputs), "T y", body + " y = v;", name)


def apply(y: Any, bias: Any = None, residual: Any = None, activation: str = "none") -> Any:
    """y (N, C, H, W), C-contiguous, becomes activation(y + bias[c] + residual) in place; returned."""
    if bias is None and residual is None and activation == "none":
        return y
    args = ([bias] if bias is not None else []) + ([residual] if residual is not None else [])  # any strides
    _kernel(bias is not None, residual is not None, activation)(*args, y.shape[2] * y.shape[3], y.shape[1], y)
    return y


def label(call: Any) -> str:
    """The epilogue a conv2d_fused call runs, in words."""
    parts = (["+ bias"] if call.shape("bias") is not None else []) + (["+ residual"] if call.shape("residual") is not None else [])
    activation = call.attrs.get("activation", "none")
    parts += [activation] if activation != "none" else []
    return f"then {', '.join(parts)} in one CuPy element-wise pass" if parts else "nothing after it"
