"""float16 convolutions exact on NaN and infinity, as in PyTorch.

cuDNN's float16 engines lose infinities (H200, cuDNN 9.19: an output whose window holds +inf or -inf came out
finite, where torch's float64 convolution has -inf), which bfloat16 and float32 do not. After each float16
forward convolution one kernel scans the input (and a weight not known to be finite) and raises a flag on the
device; a second kernel, which exits at once unless the flag is raised, then recomputes every output directly
in float32 (conv, bias, residual, activation: what the call computes), multiplying zero padding like any
input. Neither reads anything back on the host, so CUDA graphs still record them; on finite data they cost
one read of the input and an empty launch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._epilogue import ACTIVATIONS
from ._types import prelude

_THREADS, _MOST_BLOCKS = 256, 4096

_SCAN = r"""
extern "C" __global__ void flag_nonfinite(const S* x, long long n, int* flag) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        if (!isfinite((float)x[i])) { *flag = 1; return; }
}
"""

# One thread per output (grid-stride), any memory order (element strides of x, w, y and the residual as y's).
_DIRECT = r"""
extern "C" __global__ void conv2d_exact_if_flagged(const int* flag, const S* x, const S* w, const S* b, const S* r, S* y,
        int n, int c, int h, int wd, int o, int kh, int kw, int oh, int ow, int sh, int sw, int ph, int pw, int dh, int dw,
        int groups, long long xn, long long xc, long long xh, long long xw, long long wo, long long wc, long long wh,
        long long ww, long long yn, long long yc, long long yh, long long yw) {
    if (!*flag) return;
    long long total = (long long)n * o * oh * ow;
    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < total;
         index += (long long)blockDim.x * gridDim.x) {
        int xo = index % ow, yo = (index / ow) % oh, oc = (index / ((long long)ow * oh)) % o;
        int batch = index / ((long long)ow * oh * o);
        int cg = c / groups, first = (oc / (o / groups)) * cg;
        T v = 0;
        for (int ci = 0; ci < cg; ++ci)
            for (int i = 0; i < kh; ++i) {
                int row = yo * sh - ph + i * dh;
                for (int j = 0; j < kw; ++j) {
                    int col = xo * sw - pw + j * dw;
                    T input = row >= 0 && row < h && col >= 0 && col < wd
                        ? (T)x[batch * xn + (first + ci) * xc + row * xh + col * xw] : (T)0;
                    v += input * (T)w[oc * wo + ci * wc + i * wh + j * ww];
                }
            }
        long long at = batch * yn + oc * yc + yo * yh + xo * yw;
        BODY
        y[at] = (S)v;
    }
}
"""


@lru_cache(maxsize=32)
def _kernels(bias: bool, residual: bool, activation: str) -> tuple[Any, Any]:
    body = ("v += (T)b[oc]; " if bias else "") + ("v += (T)r[at]; " if residual else "") + ACTIVATIONS[activation]
    name = f"conv2d_exact_if_flagged{'_bias' * bias}{'_residual' * residual}_{activation}"
    source = prelude("float16") + _SCAN + _DIRECT.replace("BODY", body).replace("conv2d_exact_if_flagged", name)
    return cp.RawKernel(source, "flag_nonfinite"), cp.RawKernel(source, name)


def _elements(array: Any) -> list[np.int64]:
    return [np.int64(s // array.itemsize) for s in array.strides]


def repair(x: Any, w: Any, y: Any, scan_weight: bool, stride: tuple[int, int], padding: Any, dilation: Any, groups: int,
           bias: Any = None, residual: Any = None, activation: str = "none") -> None:
    """Where ``x`` (or ``w``, when ``scan_weight``), ``bias`` or ``residual`` holds NaN or infinity, ``y`` becomes
    the call's exact result: conv(x, w) + bias + residual, then ``activation``. ``residual`` is in ``y``'s memory
    order."""
    if y.size == 0:
        return
    scan, direct = _kernels(bias is not None, residual is not None, activation)
    flag = cp.zeros(1, cp.int32)
    scanned = (x, w) if scan_weight else (x,)
    for array in scanned + tuple(a for a in (bias, residual) if a is not None):  # the fused graph loses their inf too
        scan((min(-(-array.size // _THREADS), _MOST_BLOCKS),), (_THREADS,), (array, np.int64(array.size), flag))
    (top, _), (left, _) = padding
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    blocks = min(-(-y.size // _THREADS), _MOST_BLOCKS)
    args = (flag, x, w, y if bias is None else bias, y if residual is None else residual, y,
            *map(np.int32, (n, c, h, wd, o, kh, kw, y.shape[2], y.shape[3], *stride, top, left, *dilation, groups)),
            *_elements(x), *_elements(w), *_elements(y))
    direct((blocks,), (_THREADS,), args)
