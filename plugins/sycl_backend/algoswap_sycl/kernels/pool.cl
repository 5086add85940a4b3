// Part of the SYCL backend's program (kernels/matmul.cl says how it is built).
// ----------------------------------------------------------------------------- pooling
// Windows: taps start + t * d for t < k, kept where inside the input.
// The flat index (h * W + w) of the first maximum (or the last NaN) of window (oh, ow), as maxpool2d chose it.
inline int max_tap(__global const REAL *base, int H, int W, int oh, int ow, int kh, int kw,
                   int sh, int sw, int ph, int pw, int dh, int dw) {
    REAL best = -INFINITY;
    int where = -1;
    for (int i = 0; i < kh; i++) {
        int h = oh * sh - ph + i * dh;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < kw; j++) {
            int ww = ow * sw - pw + j * dw;
            if (ww < 0 || ww >= W) continue;
            REAL v = base[h * W + ww];
            if (where < 0 || v > best || isnan(v)) { best = v; where = h * W + ww; }  // the last NaN wins, as in PyTorch
        }
    }
    return where;
}

__kernel void maxpool2d(__global const REAL *x, __global REAL *y, int H, int W, int OH, int OW, int kh, int kw,
                        int sh, int sw, int ph, int pw, int dh, int dw) {
    int ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
    __global const REAL *base = x + (long)plane * H * W;
    int tap = max_tap(base, H, W, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw);
    y[((long)plane * OH + oh) * OW + ow] = tap < 0 ? -INFINITY : base[tap];
}

// The output windows along one axis that contain input coordinate h: [lo, hi], stepping checked by the caller.
inline int2 windows_of(int h, int k, int s, int p, int d, int out) {
    int top = h + p;
    int lo = top - (k - 1) * d;
    lo = lo <= 0 ? 0 : (lo + s - 1) / s;
    int hi = min(top / s, out - 1);
    return (int2)(lo, hi);
}

__kernel void maxpool2d_grad(__global const REAL *dy, __global const REAL *x, __global REAL *dx, int H, int W,
                             int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    int w = get_global_id(0), h = get_global_id(1), plane = get_global_id(2);
    __global const REAL *base = x + (long)plane * H * W;
    __global const REAL *grad = dy + (long)plane * OH * OW;
    int2 rows = windows_of(h, kh, sh, ph, dh, OH), cols = windows_of(w, kw, sw, pw, dw, OW);
    REAL total = 0;
    for (int oh = rows.x; oh <= rows.y; oh++) {
        if ((h + ph - oh * sh) % dh) continue;
        for (int ow = cols.x; ow <= cols.y; ow++) {
            if ((w + pw - ow * sw) % dw) continue;
            if (max_tap(base, H, W, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) == h * W + w) total += grad[oh * OW + ow];
        }
    }
    dx[((long)plane * H + h) * W + w] = total;
}

// Average window (oh, ow): its clipped bounds and its divisor, as PyTorch counts it.
inline REAL avg_window(int oh, int ow, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                       int include_pad, int divisor, int4 *bounds) {
    int hs = oh * sh - ph, ws = ow * sw - pw;
    int he = min(hs + kh, H + ph), we = min(ws + kw, W + pw);
    int pool = (he - hs) * (we - ws);
    hs = max(hs, 0); ws = max(ws, 0); he = min(he, H); we = min(we, W);
    *bounds = (int4)(hs, he, ws, we);
    if (divisor > 0) return (REAL)divisor;
    return (REAL)(include_pad ? pool : (he - hs) * (we - ws));
}

__kernel void avgpool2d(__global const REAL *x, __global REAL *y, int H, int W, int OH, int OW, int kh, int kw,
                        int sh, int sw, int ph, int pw, int include_pad, int divisor) {
    int ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
    int4 b;
    REAL div = avg_window(oh, ow, H, W, kh, kw, sh, sw, ph, pw, include_pad, divisor, &b);
    __global const REAL *base = x + (long)plane * H * W;
    REAL total = 0;
    for (int h = b.x; h < b.y; h++)
        for (int w = b.z; w < b.w; w++) total += base[h * W + w];
    y[((long)plane * OH + oh) * OW + ow] = total / div;
}

__kernel void avgpool2d_grad(__global const REAL *dy, __global REAL *dx, int H, int W, int OH, int OW, int kh, int kw,
                             int sh, int sw, int ph, int pw, int include_pad, int divisor) {
    int w = get_global_id(0), h = get_global_id(1), plane = get_global_id(2);
    __global const REAL *grad = dy + (long)plane * OH * OW;
    int2 rows = windows_of(h, kh, sh, ph, 1, OH), cols = windows_of(w, kw, sw, pw, 1, OW);
    REAL total = 0;
    for (int oh = rows.x; oh <= rows.y; oh++)
        for (int ow = cols.x; ow <= cols.y; ow++) {
            int4 b;
            REAL div = avg_window(oh, ow, H, W, kh, kw, sh, sw, ph, pw, include_pad, divisor, &b);
            if (h >= b.x && h < b.y && w >= b.z && w < b.w) total += grad[oh * OW + ow] / div;
        }
    dx[((long)plane * H + h) * W + w] = total;
}

// Adaptive windows [floor(i * in / out), ceil((i + 1) * in / out)).
inline int2 adaptive_window(int i, int in, int out) {
    return (int2)((i * in) / out, ((i + 1) * in + out - 1) / out);
}

__kernel void adaptiveavgpool2d(__global const REAL *x, __global REAL *y, int H, int W, int OH, int OW) {
    int ow = get_global_id(0), oh = get_global_id(1), plane = get_global_id(2);
    int2 r = adaptive_window(oh, H, OH), c = adaptive_window(ow, W, OW);
    __global const REAL *base = x + (long)plane * H * W;
    REAL total = 0;
    for (int h = r.x; h < r.y; h++)
        for (int w = c.x; w < c.y; w++) total += base[h * W + w];
    y[((long)plane * OH + oh) * OW + ow] = total / (REAL)((r.y - r.x) * (c.y - c.x));
}

__kernel void adaptiveavgpool2d_grad(__global const REAL *dy, __global REAL *dx, int H, int W, int OH, int OW) {
    int w = get_global_id(0), h = get_global_id(1), plane = get_global_id(2);
    __global const REAL *grad = dy + (long)plane * OH * OW;
    REAL total = 0;
    for (int oh = (h * OH) / H; oh < OH; oh++) {
        int2 r = adaptive_window(oh, H, OH);
        if (r.x > h) break;
        if (h >= r.y) continue;
        for (int ow = (w * OW) / W; ow < OW; ow++) {
            int2 c = adaptive_window(ow, W, OW);
            if (c.x > w) break;
            if (w < c.y) total += grad[oh * OW + ow] / (REAL)((r.y - r.x) * (c.y - c.x));
        }
    }
    dx[((long)plane * H + h) * W + w] = total;
}

// ----------------------------------------------------------------------------- activations
__kernel void relu(__global const REAL *x, __global REAL *y) {
    long i = get_global_id(0);
    REAL v = x[i];
    y[i] = v > (REAL)0 ? v : (isnan(v) ? v : (REAL)0);
}

__kernel void relu_grad(__global const REAL *dy, __global const REAL *x, __global REAL *dx) {
    long i = get_global_id(0);
    dx[i] = x[i] <= (REAL)0 ? (REAL)0 : dy[i];  // NaN passes the gradient, as in PyTorch
}

// ----------------------------------------------------------------------------- add, and conv2d_fused's epilogue
__kernel void add(__global const REAL *a, __global const REAL *b, __global REAL *y) {
    size_t i = get_global_id(0);
    y[i] = a[i] + b[i];
}

// y = relu?(y + residual?) in place, one pass over a convolution's fresh output (NaN passes the relu).
__kernel void epilogue(__global REAL *y, __global const REAL *residual, int has_residual, int relu) {
    size_t i = get_global_id(0);
    REAL v = y[i];
    if (has_residual) v += residual[i];
    if (relu && !(v > (REAL)0) && v == v) v = (REAL)0;
    y[i] = v;
}
