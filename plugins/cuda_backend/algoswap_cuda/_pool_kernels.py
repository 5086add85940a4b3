"""The poolings' CUDA kernels (sources, compiled per dtype by ``_kernels.kernel`` after ``_types.prelude``).

NCHW: one thread per output element, its plane read directly. NHWC (channels-last memory, ``nhwc_source``): one
thread per LANES consecutive channels of one output pixel (LANES = 16 bytes of them where the channels and the
addresses allow: one 16-byte load per window tap, else 1), so consecutive threads read consecutive memory, and
the index arithmetic is paid once per LANES outputs. Outputs keep their input's memory order; the gradients take
NCHW arrays."""

from __future__ import annotations

from ._kernels import lanes_io

# Windows start at out * stride - pad; a max window skips positions outside the input (a window
# wholly outside gives -inf, as in PyTorch).
MAXPOOL2D = r"""
// The offset in its plane of the maximum of output element `index`'s window (the last NaN wins, as in
// PyTorch; -1: empty window).
__device__ inline int window_argmax(const S* plane, long long index, int h, int wd, int oh, int ow,
        int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    int xo = index % ow, yo = (index / ow) % oh, at = -1;
    T best = 0;
    for (int i = 0; i < kh; ++i) {
        int row = yo * sh - ph + i * dh;
        if (row < 0 || row >= h) continue;
        for (int j = 0; j < kw; ++j) {
            int col = xo * sw - pw + j * dw;
            if (col < 0 || col >= wd) continue;
            T v = (T)plane[row * wd + col];
            if (at < 0 || v > best || v != v) { best = v; at = row * wd + col; }
        }
    }
    return at;
}

extern "C" __global__ void maxpool2d(const S* x, S* y, long long planes, int h, int wd, int oh, int ow,
        int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    const S* plane = x + (index / ((long long)ow * oh)) * h * wd;
    int at = window_argmax(plane, index, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw);
    y[index] = at < 0 ? (S)(-(T)__int_as_float(0x7f800000)) : plane[at];
}

extern "C" __global__ void maxpool2d_grad(const S* dy, const S* x, T* dx, long long planes, int h, int wd,
        int oh, int ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    long long offset = (index / ((long long)ow * oh)) * h * wd;
    int at = window_argmax(x + offset, index, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw);
    if (at >= 0) atomicAdd(dx + offset + at, (T)dy[index]);
}
"""

# PyTorch's average pooling: the divisor counts the window clipped to the padded input
# (count_include_pad), or to the input, or is divisor_override (> 0).
AVGPOOL2D = r"""
__device__ inline T divisor(int row0, int col0, int h, int wd, int kh, int kw, int ph, int pw,
        int include_pad, int override_) {
    if (override_ > 0) return (T)override_;
    int r1 = min(row0 + kh, h + ph), c1 = min(col0 + kw, wd + pw);
    if (include_pad) return (T)((r1 - row0) * (c1 - col0));
    return (T)((min(r1, h) - max(row0, 0)) * (min(c1, wd) - max(col0, 0)));
}

extern "C" __global__ void avgpool2d(const S* x, S* y, long long planes, int h, int wd, int oh, int ow,
        int kh, int kw, int sh, int sw, int ph, int pw, int include_pad, int override_) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int xo = index % ow, yo = (index / ow) % oh;
    const S* plane = x + (index / ((long long)ow * oh)) * h * wd;
    int row0 = yo * sh - ph, col0 = xo * sw - pw;
    T sum = 0;
    for (int row = max(row0, 0); row < min(row0 + kh, h); ++row)
        for (int col = max(col0, 0); col < min(col0 + kw, wd); ++col) sum += (T)plane[row * wd + col];
    y[index] = (S)(sum / divisor(row0, col0, h, wd, kh, kw, ph, pw, include_pad, override_));
}

extern "C" __global__ void avgpool2d_grad(const S* dy, T* dx, long long planes, int h, int wd, int oh, int ow,
        int kh, int kw, int sh, int sw, int ph, int pw, int include_pad, int override_) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int xo = index % ow, yo = (index / ow) % oh;
    T* plane = dx + (index / ((long long)ow * oh)) * h * wd;
    int row0 = yo * sh - ph, col0 = xo * sw - pw;
    T share = (T)dy[index] / divisor(row0, col0, h, wd, kh, kw, ph, pw, include_pad, override_);
    for (int row = max(row0, 0); row < min(row0 + kh, h); ++row)
        for (int col = max(col0, 0); col < min(col0 + kw, wd); ++col) atomicAdd(plane + row * wd + col, share);
}
"""

# Adaptive windows: rows [floor(i*h/oh), ceil((i+1)*h/oh)), likewise columns.
ADAPTIVE = r"""
extern "C" __global__ void adaptiveavgpool2d(const S* x, S* y, long long planes, int h, int wd, int oh, int ow) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int xo = index % ow, yo = (index / ow) % oh;
    const S* plane = x + (index / ((long long)ow * oh)) * h * wd;
    int r0 = (yo * h) / oh, r1 = ((yo + 1) * h + oh - 1) / oh;
    int c0 = (xo * wd) / ow, c1 = ((xo + 1) * wd + ow - 1) / ow;
    T sum = 0;
    for (int row = r0; row < r1; ++row)
        for (int col = c0; col < c1; ++col) sum += (T)plane[row * wd + col];
    y[index] = (S)(sum / (T)((r1 - r0) * (c1 - c0)));
}

extern "C" __global__ void adaptiveavgpool2d_grad(const S* dy, T* dx, long long planes, int h, int wd, int oh, int ow) {
    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= planes * oh * ow) return;
    int xo = index % ow, yo = (index / ow) % oh;
    T* plane = dx + (index / ((long long)ow * oh)) * h * wd;
    int r0 = (yo * h) / oh, r1 = ((yo + 1) * h + oh - 1) / oh;
    int c0 = (xo * wd) / ow, c1 = ((xo + 1) * wd + ow - 1) / ow;
    T share = (T)dy[index] / (T)((r1 - r0) * (c1 - c0));
    for (int row = r0; row < r1; ++row)
        for (int col = c0; col < c1; ++col) atomicAdd(plane + row * wd + col, share);
}
"""


# NHWC: one thread per group of LANES channels of output pixel (image, yo, xo); `groups` = C / LANES. Its outputs
# are y[index * LANES ...]: the groups enumerate y's memory in order.
NHWC = r"""
struct Pixel { const S* image; int yo, xo; };  // image: x at the pixel's image and first channel
__device__ inline Pixel pixel_of(long long index, const S* x, int c, int h, int wd, int oh, int ow) {
    const int groups = c / LANES, per_image = groups * oh * ow;
    const long long image = index / per_image;
    const int rest = (int)(index - image * per_image), at = rest / groups;
    Pixel p;
    p.image = x + image * h * wd * c + (rest - at * groups) * LANES;
    p.yo = at / ow;
    p.xo = at - p.yo * ow;
    return p;
}

// The first tap of a window sets each lane; NaN wins over any number, the last NaN over an earlier one (as in
// PyTorch); a window wholly in the padding gives -inf.
extern "C" __global__ void maxpool2d_nhwc(const S* x, S* y, long long groups_total, int c, int h, int wd, int oh,
        int ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= groups_total) return;
    const Pixel p = pixel_of(index, x, c, h, wd, oh, ow);
    T best[LANES], v[LANES];
    bool seen = false;
    for (int i = 0; i < kh; ++i) {
        const int row = p.yo * sh - ph + i * dh;
        if (row < 0 || row >= h) continue;
        for (int j = 0; j < kw; ++j) {
            const int col = p.xo * sw - pw + j * dw;
            if (col < 0 || col >= wd) continue;
            load_lanes(p.image + ((long long)row * wd + col) * c, v);
            for (int k = 0; k < LANES; ++k)
                if (!seen || v[k] > best[k] || v[k] != v[k]) best[k] = v[k];
            seen = true;
        }
    }
    if (!seen)
        for (int k = 0; k < LANES; ++k) best[k] = -(T)__int_as_float(0x7f800000);
    store_lanes(best, y + index * LANES);
}

// PyTorch's divisor: the window clipped to the padded input (count_include_pad), or to the input, or divisor_override (> 0).
extern "C" __global__ void avgpool2d_nhwc(const S* x, S* y, long long groups_total, int c, int h, int wd, int oh,
        int ow, int kh, int kw, int sh, int sw, int ph, int pw, int include_pad, int override_) {
    const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= groups_total) return;
    const Pixel p = pixel_of(index, x, c, h, wd, oh, ow);
    const int row0 = p.yo * sh - ph, col0 = p.xo * sw - pw;
    const int r1 = min(row0 + kh, h + ph), c1 = min(col0 + kw, wd + pw);
    const T divisor = override_ > 0 ? (T)override_ : include_pad ? (T)((r1 - row0) * (c1 - col0))
        : (T)((min(r1, h) - max(row0, 0)) * (min(c1, wd) - max(col0, 0)));
    T sum[LANES], v[LANES];
    for (int k = 0; k < LANES; ++k) sum[k] = 0;
    for (int row = max(row0, 0); row < min(row0 + kh, h); ++row)
        for (int col = max(col0, 0); col < min(col0 + kw, wd); ++col) {
            load_lanes(p.image + ((long long)row * wd + col) * c, v);
            for (int k = 0; k < LANES; ++k) sum[k] += v[k];
        }
    for (int k = 0; k < LANES; ++k) sum[k] = sum[k] / divisor;
    store_lanes(sum, y + index * LANES);
}

// Adaptive windows: rows [floor(i*h/oh), ceil((i+1)*h/oh)), likewise columns.
extern "C" __global__ void adaptiveavgpool2d_nhwc(const S* x, S* y, long long groups_total, int c, int h, int wd,
        int oh, int ow) {
    const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= groups_total) return;
    const Pixel p = pixel_of(index, x, c, h, wd, oh, ow);
    const int r0 = (p.yo * h) / oh, r1 = ((p.yo + 1) * h + oh - 1) / oh;
    const int c0 = (p.xo * wd) / ow, c1 = ((p.xo + 1) * wd + ow - 1) / ow;
    T sum[LANES], v[LANES];
    for (int k = 0; k < LANES; ++k) sum[k] = 0;
    for (int row = r0; row < r1; ++row)
        for (int col = c0; col < c1; ++col) {
            load_lanes(p.image + ((long long)row * wd + col) * c, v);
            for (int k = 0; k < LANES; ++k) sum[k] += v[k];
        }
    for (int k = 0; k < LANES; ++k) sum[k] = sum[k] / (T)((r1 - r0) * (c1 - c0));
    store_lanes(sum, y + index * LANES);
}
"""


def nhwc_source(lanes: int) -> str:
    """The NHWC kernels for ``lanes`` channels per thread (16 bytes of them, or 1), each named ``<op>_nhwc_<lanes>``."""
    return lanes_io(lanes) + NHWC.replace("_nhwc(", f"_nhwc_{lanes}(")
