"""float16 convolutions exact on NaN and infinity, as in PyTorch.

cuDNN's float16 engines lose infinities (H200, cuDNN 9.19: an output whose window holds +inf or -inf came out
finite, where torch's float64 convolution has -inf), which bfloat16 and float32 do not. After each float16
forward convolution one kernel scans the input, a weight not known to be finite, the bias and the residual
(one launch, 16-byte loads, an exponent test on the bit patterns) and raises a flag on the device; a second
kernel, which exits at once unless the flag is raised, then recomputes every output directly in float32
(conv, bias, residual, activation: what the call computes), multiplying zero padding like any input. Neither
reads anything back on the host, so CUDA graphs still record them; on finite data they cost one read of the
scanned arrays and an empty launch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._epilogue import ACTIVATIONS
from ._types import prelude

_THREADS, _MOST_BLOCKS = 256, 4096
SCANNED = 4  # the most arrays one scan launch reads
# dtype -> (the unsigned C type of its bit patterns, the exponent mask: all its bits set means inf or NaN)
BITS = {"float16": ("unsigned short", "0x7C00u"), "bfloat16": ("unsigned short", "0x7F80u"),
        "float32": ("unsigned int", "0x7F800000u"), "float64": ("unsigned long long", "0x7FF0000000000000ull")}

# Every thread ORs the exponent test of its share of each array (16-byte loads between a scalar head, up to
# the first 16-byte boundary, and a scalar tail) into a register; a block that saw any stores the flag once.
_SCAN = r"""
typedef BITS U;
__device__ inline int nonfinite(U u) { return (u & MASK) == MASK; }
__device__ inline int nonfinite_in(const U* p, long long n, long long thread, long long threads) {
    const long long per = 16 / sizeof(U);
    long long head = (long long)((16 - ((unsigned long long)p & 15)) & 15) / (long long)sizeof(U);
    head = head < n ? head : n;
    const long long vectors = (n - head) / per;
    int found = 0;
    for (long long i = thread; i < head; i += threads) found |= nonfinite(p[i]);
    const uint4* body = reinterpret_cast<const uint4*>(p + head);
    for (long long i = thread; i < vectors; i += threads) {
        const uint4 v = body[i];
        const U* lanes = reinterpret_cast<const U*>(&v);
        for (int k = 0; k < per; ++k) found |= nonfinite(lanes[k]);
    }
    for (long long i = head + vectors * per + thread; i < n; i += threads) found |= nonfinite(p[i]);
    return found;
}

extern "C" __global__ void flag_nonfinite(const U* a, long long na, const U* b, long long nb, const U* c, long long nc,
        const U* d, long long nd, int* flag) {
    const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x, threads = (long long)blockDim.x * gridDim.x;
    int found = nonfinite_in(a, na, thread, threads) | nonfinite_in(b, nb, thread, threads)
        | nonfinite_in(c, nc, thread, threads) | nonfinite_in(d, nd, thread, threads);
    if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}
"""


def scan_source(dtype: str) -> str:
    """The scan kernel flag_nonfinite for arrays of ``dtype``."""
    bits, mask = BITS[dtype]
    return _SCAN.replace("BITS", bits).replace("MASK", mask)


@lru_cache(maxsize=8)
def _scan(dtype: str) -> Any:
    return cp.RawKernel(scan_source(dtype), "flag_nonfinite")


def _memory(array: Any) -> Any:
    """The elements of ``array`` as they lie in memory (a 1-D view where they fill one span, in any order, else
    a C-contiguous copy)."""
    axes = sorted(range(array.ndim), key=lambda axis: -array.strides[axis])
    view = array.transpose(axes)
    return view.reshape(-1) if view.flags.c_contiguous else cp.ascontiguousarray(array).reshape(-1)


def flag_nonfinite(arrays: tuple[Any, ...], flag: Any = None) -> Any:
    """A device int32 of one element (``flag``, else a new one, zeroed) set to 1 where any of ``arrays`` (up to
    SCANNED, of one float dtype, in any memory order) holds NaN or infinity: one launch, nothing read back."""
    if flag is None:
        flag = cp.zeros(1, cp.int32)
    scanned = [_memory(a) for a in arrays if a.size]
    if not scanned:
        return flag
    assert len(scanned) <= SCANNED and len({a.dtype for a in scanned}) == 1, [(a.shape, a.dtype) for a in arrays]
    per = 16 // scanned[0].itemsize
    blocks = max(1, min(-(-max(a.size for a in scanned) // (per * _THREADS)), _MOST_BLOCKS))
    absent = SCANNED - len(scanned)
    args = [value for a, n in zip(scanned + [scanned[0]] * absent, [a.size for a in scanned] + [0] * absent)
            for value in (a, np.int64(n))]
    _scan(scanned[0].dtype.name)((blocks,), (_THREADS,), (*args, flag))
    return flag


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


def direct_source(dtype: str, bias: bool, residual: bool, activation: str) -> tuple[str, str]:
    """The recomputing kernel of a call with these parts, for ``dtype``, and its name."""
    body = ("v += (T)b[oc]; " if bias else "") + ("v += (T)r[at]; " if residual else "") + ACTIVATIONS[activation]
    name = f"conv2d_exact_if_flagged{'_bias' * bias}{'_residual' * residual}_{activation}"
    return prelude(dtype) + _DIRECT.replace("BODY", body).replace("conv2d_exact_if_flagged", name), name


@lru_cache(maxsize=32)
def _direct(dtype: str, bias: bool, residual: bool, activation: str) -> Any:
    return cp.RawKernel(*direct_source(dtype, bias, residual, activation))


def _elements(array: Any) -> list[np.int64]:
    return [np.int64(s // array.itemsize) for s in array.strides]


def repair(x: Any, w: Any, y: Any, scan_weight: bool, stride: tuple[int, int], padding: Any, dilation: Any, groups: int,
           bias: Any = None, residual: Any = None, activation: str = "none") -> None:
    """Where ``x`` (or ``w``, when ``scan_weight``), ``bias`` or ``residual`` holds NaN or infinity, ``y`` becomes
    the call's exact result: conv(x, w) + bias + residual, then ``activation``. ``residual`` is in ``y``'s memory
    order."""
    if y.size == 0:
        return
    scanned = (x, w) if scan_weight else (x,)
    flag = flag_nonfinite(scanned + tuple(a for a in (bias, residual) if a is not None))  # the fused graph loses their inf too
    (top, _), (left, _) = padding
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    blocks = min(-(-y.size // _THREADS), _MOST_BLOCKS)
    args = (flag, x, w, y if bias is None else bias, y if residual is None else residual, y,
            *map(np.int32, (n, c, h, wd, o, kh, kw, y.shape[2], y.shape[3], *stride, top, left, *dilation, groups)),
            *_elements(x), *_elements(w), *_elements(y))
    _direct(y.dtype.name, bias is not None, residual is not None, activation)((blocks,), (_THREADS,), args)
