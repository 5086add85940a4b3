"""Our CUDA kernels, compiled by CuPy (NVRTC) on first use, once per element type. One thread per
output element. Each source starts with ``_types.prelude``: ``S`` is the arrays' element type (__half,
__nv_bfloat16, float or double: what they store), ``T`` the type sums and arithmetic run in (float for the
half precisions, else ``S``: _runtime.C_TYPES); a value is read as ``(T)x[i]`` and stored as ``(S)v``, rounded
once. Gradients that scatter-add (pooling, interpolate) add into a buffer of ``T`` (float32 for the half
precisions, rounded once afterwards: atomicAdd on __half or __nv_bfloat16 would round every partial sum)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import _runtime, _types

BLOCK = 256

CONV2D_DIRECT = r"""
extern "C" __global__ void conv2d_direct(const S* x, const S* w, const S* b, S* y,
        int n, int c, int h, int wd, int o, int kh, int kw, int oh, int ow,
        int sh, int sw, int ph, int pw, int dh, int dw, int groups, int has_bias) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long total = (long long)n * o * oh * ow;
    if (index >= total) return;
    int xo = index % ow, yo = (index / ow) % oh, oc = (index / ((long long)ow * oh)) % o;
    int batch = index / ((long long)ow * oh * o);
    int cg = c / groups, first = (oc / (o / groups)) * cg;
    T sum = has_bias ? (T)b[oc] : (T)0;
    for (int ci = 0; ci < cg; ++ci) {
        const S* plane = x + ((long long)batch * c + first + ci) * h * wd;
        const S* taps = w + ((long long)oc * cg + ci) * kh * kw;
        for (int i = 0; i < kh; ++i) {
            int row = yo * sh - ph + i * dh;
            bool inside = row >= 0 && row < h;
            for (int j = 0; j < kw; ++j) {
                int col = xo * sw - pw + j * dw;
                // a tap in the padding multiplies a zero, as zero padding does in PyTorch (0 * inf is NaN)
                T v = inside && col >= 0 && col < wd ? (T)plane[(long long)row * wd + col] : (T)0;
                sum += v * (T)taps[i * kw + j];
            }
        }
    }
    y[index] = (S)sum;
}
"""

# interpolate: each output (plane, i, j) reads input rows rows[kr * i + a] (a < kr) and columns cols[kc * j + b]
# (b < kc) with weights of the same layout (algoswap.interpolation_taps, made on the host in torch's arithmetic:
# k is 1 for nearest or a copy, 2 for bilinear, 4 for bicubic); a single tap is read, not multiplied. Sums as
# torch does: along each row first, then between the rows, each from its first term.
INTERPOLATE = r"""
__device__ inline T along_row(const S* line, const int* cols, const T* weights, int kc, int j) {
    if (kc == 1) return (T)line[cols[j]];
    T sum = weights[kc * j] * (T)line[cols[kc * j]];
    for (int b = 1; b < kc; ++b) sum += weights[kc * j + b] * (T)line[cols[kc * j + b]];
    return sum;
}

extern "C" __global__ void interpolate(const S* x, S* y, const int* rows, const int* cols, const T* row_weights,
        const T* col_weights, long long planes, int h, int wd, int oh, int ow, int kr, int kc) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int j = index % ow, i = (index / ow) % oh;
    const S* plane = x + (index / ((long long)ow * oh)) * h * wd;
    if (kr == 1) { y[index] = (S)along_row(plane + (long long)rows[i] * wd, cols, col_weights, kc, j); return; }
    T sum = row_weights[kr * i] * along_row(plane + (long long)rows[kr * i] * wd, cols, col_weights, kc, j);
    for (int a = 1; a < kr; ++a)
        sum += row_weights[kr * i + a] * along_row(plane + (long long)rows[kr * i + a] * wd, cols, col_weights, kc, j);
    y[index] = (S)sum;
}

// One thread per grad_output element: its gradient times each tap's weights (a single tap: 1), added to the input.
extern "C" __global__ void interpolate_grad(const S* dy, T* dx, const int* rows, const int* cols, const T* row_weights,
        const T* col_weights, long long planes, int h, int wd, int oh, int ow, int kr, int kc) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int j = index % ow, i = (index / ow) % oh;
    T* plane = dx + (index / ((long long)ow * oh)) * h * wd;
    const T g = (T)dy[index];
    for (int a = 0; a < kr; ++a) {
        const T row = kr == 1 ? g : g * row_weights[kr * i + a];
        for (int b = 0; b < kc; ++b)
            atomicAdd(plane + (long long)rows[kr * i + a] * wd + cols[kc * j + b], kc == 1 ? row : row * col_weights[kc * j + b]);
    }
}
"""


# PyTorch's zero padding is multiplied like any input (0 * inf and 0 * NaN are NaN); cuDNN's engines skip
# the taps that fall in the padding. Run after the engine, these put those NaN back: in the forward
# output wherever a padding tap meets a non-finite weight, in the weight gradient dw[o, :, i, j] wherever
# tap (i, j) of output channel o reads the padding at a non-finite grad_output.
PADDING_NAN = r"""
// Outputs [*lo, *hi) of `outs` read inside [0, size) at out * stride + offset; the others read the padding.
__device__ inline void reading_inside(int offset, int stride, int size, int outs, int* lo, int* hi) {
    int before = -offset, after = size - offset;  // out * stride must reach these
    *lo = min(before <= 0 ? 0 : (before + stride - 1) / stride, outs);
    *hi = max(*lo, min(after <= 0 ? 0 : (after + stride - 1) / stride, outs));
}

// One thread per weight. A non-finite weight (the first along the input channels of its output channel
// and tap, so that one thread per tap writes) makes NaN of every output where its tap reads the padding.
// y is NCHW (channels_last 0) or NHWC (1) in memory; w is KCRS (weight_channels_last 0) or KRSC (1).
extern "C" __global__ void padding_nan_forward(const S* w, S* y, int n, int o, int cg, int kh, int kw,
        int h, int wd, int oh, int ow, int sh, int sw, int ph, int pw, int dh, int dw, int channels_last,
        int weight_channels_last) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= (long long)o * cg * kh * kw) return;
    int taps = kh * kw, tap = index % taps, ci = (index / taps) % cg, oc = index / ((long long)taps * cg);
    #define WEIGHT(c) w[weight_channels_last ? ((long long)oc * taps + tap) * cg + (c) : ((long long)oc * cg + (c)) * taps + tap]
    if (isfinite((T)WEIGHT(ci))) return;
    for (int earlier = 0; earlier < ci; ++earlier)
        if (!isfinite((T)WEIGHT(earlier))) return;
    #undef WEIGHT
    int r0, r1, c0, c1;
    reading_inside(tap / kw * dh - ph, sh, h, oh, &r0, &r1);
    reading_inside(tap % kw * dw - pw, sw, wd, ow, &c0, &c1);
    const S nan = (S)__int_as_float(0x7fc00000);
    long long step = channels_last ? o : 1;  // between neighbouring columns of one channel
    for (int b = 0; b < n; ++b)
        for (int p = 0; p < oh; ++p) {
            S* row = channels_last ? y + (((long long)b * oh + p) * ow) * o + oc : y + (((long long)b * o + oc) * oh + p) * ow;
            bool padded = p < r0 || p >= r1;  // else only the columns outside [c0, c1)
            for (int q = 0; q < (padded ? ow : c0); ++q) row[q * step] = nan;
            for (int q = padded ? ow : c1; q < ow; ++q) row[q * step] = nan;
        }
}

// One thread per grad_output row: it reads the entries whose window reaches the padding (all of them in
// a row whose window does, else the columns whose window does). A non-finite one claims each of its taps
// in the padding; the first claim of (output channel, tap) sets grad_weight[oc, :, tap] to NaN (claimed: zeros).
extern "C" __global__ void padding_nan_weight_grad(const S* dy, S* grad_weight, int* claimed, long long planes,
        int o, int cg, int kh, int kw, int h, int wd, int oh, int ow, int sh, int sw, int ph, int pw, int dh, int dw) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh) return;
    int p = index % oh, oc = (index / oh) % o, r0, r1, c0, c1, unused;
    reading_inside(-ph, sh, h, oh, &r0, &unused);  // the first tap row is inside from r0 on
    reading_inside((kh - 1) * dh - ph, sh, h, oh, &unused, &r1);  // the last one before r1
    reading_inside(-pw, sw, wd, ow, &c0, &unused);
    reading_inside((kw - 1) * dw - pw, sw, wd, ow, &unused, &c1);
    bool padded = p < r0 || p >= r1;
    const S* line = dy + index * ow;
    const S nan = (S)__int_as_float(0x7fc00000);
    auto claim_padding_taps = [&](int q) {
        if (isfinite((T)line[q])) return;
        for (int i = 0; i < kh; ++i) {
            int row = p * sh - ph + i * dh;
            for (int j = 0; j < kw; ++j) {
                int col = q * sw - pw + j * dw, tap = i * kw + j;
                if (row >= 0 && row < h && col >= 0 && col < wd) continue;
                if (atomicExch(claimed + oc * kh * kw + tap, 1)) continue;
                for (int ci = 0; ci < cg; ++ci) grad_weight[((long long)oc * cg + ci) * kh * kw + tap] = nan;
            }
        }
    };
    for (int q = 0; q < (padded ? ow : c0); ++q) claim_padding_taps(q);
    for (int q = padded ? ow : max(c0, c1); q < ow; ++q) claim_padding_taps(q);
}
"""

# A CSR matrix (index type I) times a dense C-contiguous one: only stored entries enter each sum, as in
# scipy and PyTorch. (cuSPARSE's SpMM, CuPy 14.2 / CUDA 13 on the H200, added 0 * dense[0, :] to the last row.)
CSRMM = r"""
extern "C" __global__ void csrmm(const I* indptr, const I* indices, const S* values, const S* dense, S* out,
        int rows, int cols) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= (long long)rows * cols) return;
    int row = index / cols, col = index % cols;
    T sum = 0;
    for (I k = indptr[row]; k < indptr[row + 1]; ++k) sum += (T)values[k] * (T)dense[(long long)indices[k] * cols + col];
    out[index] = (S)sum;
}
"""


# A thread's LANES consecutive elements: one 16-byte access where LANES of S fill 16 bytes (the caller checks the
# alignment), else one access each; computed in T between.
_LANES_IO = r"""
__device__ inline void load_lanes(const S* from, T* to) {
    if (LANES * sizeof(S) == 16) {
        const uint4 raw = *reinterpret_cast<const uint4*>(from);
        const S* lanes = reinterpret_cast<const S*>(&raw);
        for (int k = 0; k < LANES; ++k) to[k] = (T)lanes[k];
    } else {
        for (int k = 0; k < LANES; ++k) to[k] = (T)from[k];
    }
}

__device__ inline void store_lanes(const T* from, S* to) {
    if (LANES * sizeof(S) == 16) {
        uint4 raw;
        S* lanes = reinterpret_cast<S*>(&raw);
        for (int k = 0; k < LANES; ++k) lanes[k] = (S)from[k];
        *reinterpret_cast<uint4*>(to) = raw;
    } else {
        for (int k = 0; k < LANES; ++k) to[k] = (S)from[k];
    }
}
"""


def lanes_io(lanes: int) -> str:
    """The head of a kernel source whose threads each take ``lanes`` consecutive elements: LANES, load_lanes and
    store_lanes (after ``_types.prelude``)."""
    return f"constexpr int LANES = {lanes};\n" + _LANES_IO


def lanes(channels: int, *arrays: Any) -> int:
    """Consecutive channels per thread: 16 bytes of them where ``channels`` is a multiple of that and every array's
    memory starts on a 16-byte boundary, else 1."""
    count = 16 // arrays[0].itemsize
    return count if channels % count == 0 and all(_runtime.address(a) % 16 == 0 for a in arrays) else 1


@lru_cache(maxsize=128)  # every (source, kernel, dtype)
def kernel(source: str, name: str, dtype: str) -> Any:
    """The compiled kernel ``name`` of ``source`` for element type ``dtype``."""
    return _types.raw_kernel(source, name, dtype)


def launch(source: str, name: str, dtype: str, count: int, arrays: tuple[Any, ...], planes: int | None,
           *ints: int) -> None:
    """Run ``name`` with one thread for each of ``count`` outputs: arguments are the arrays, then the
    number of planes as a 64-bit integer (where the kernel takes one), then C ints."""
    if count == 0:
        return
    args = list(arrays) + ([] if planes is None else [np.int64(planes)]) + [np.int32(v) for v in ints]
    grid = (count + BLOCK - 1) // BLOCK
    kernel(source, name, dtype)((grid,), (BLOCK,), tuple(args))
