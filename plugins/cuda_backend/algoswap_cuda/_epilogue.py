"""What follows a convolution, applied in place on its output in one pass over memory: the bias per
channel, a residual, relu. For plain float32, cuDNN 9 builds no engine for a convolution graph with
these as pointwise nodes: its fusion engines compute in TF32 (measured on the H200, cuDNN 9.19:
relative error 1e-4 to 3e-4 against float64), and none takes a residual in NCHW.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp


@lru_cache(maxsize=8)  # every (bias, residual, relu)
def _kernel(bias: bool, residual: bool, relu: bool) -> Any:
    inputs = (["raw T b"] if bias else []) + (["T r"] if residual else []) + ["int32 plane", "int32 channels"]
    body = "T v = y;"
    if bias:
        body += " v += b[(i / plane) % channels];"
    if residual:
        body += " v += r;"
    if relu:
        body += " if (!(v > (T)0) && v == v) v = (T)0;"  # NaN passes, as in numpy's maximum
    name = f"algoswap_epilogue{'_bias' * bias}{'_residual' * residual}{'_relu' * relu}"
    return cp.ElementwiseKernel(", ".join(inputs), "T y", body + " y = v;", name)


def apply(y: Any, bias: Any = None, residual: Any = None, relu: bool = False) -> Any:
    """y (N, C, H, W), C-contiguous, becomes relu?(y + bias[c] + residual) in place; returned."""
    if bias is None and residual is None and not relu:
        return y
    args = ([bias] if bias is not None else []) + ([residual] if residual is not None else [])  # any strides
    _kernel(bias is not None, residual is not None, relu)(*args, y.shape[2] * y.shape[3], y.shape[1], y)
    return y


def label(call: Any) -> str:
    """The epilogue a conv2d_fused call runs, in words."""
    parts = (["+ bias"] if call.shape("bias") is not None else []) + (["+ residual"] if call.shape("residual") is not None else [])
    parts += ["relu"] if call.attrs.get("activation") == "relu" else []
    return f"then {', '.join(parts)} in one CuPy element-wise pass" if parts else "nothing after it"
