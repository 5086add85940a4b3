// OpenCL C kernels of the algoswap SYCL backend, built at run time through dpctl, once per device
// and dtype: REAL is float or double (-DREAL=...). Arrays are C-contiguous NCHW / row-major.
// dpctl ranges list dimensions slowest first: get_global_id(0) is the LAST entry of the range.

#define REAL16 CAT(REAL, 16)
#define REAL8 CAT(REAL, 8)
#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b

// ----------------------------------------------------------------------------- matrix product
// C[m, n] = sum_k A[m*sam + k*sak] * B[k*ldb + n] (+ bias), batched over get_global_id(2) = nb*G + g;
// C starts c_off elements into its buffer.
// Each work-item keeps a TM x 32 register tile (two REAL16 per row): B rows are read with vload16,
// A values are broadcast. With LOCAL_PANEL (devices whose local memory is on-chip: GPUs), the
// work-group's WGN work-items share one TM x KT panel of A staged in local memory. On a CPU device
// local memory is ordinary cached memory, and the barriers staging needs cost more than they save
// (measured on the OpenCL CPU device: 38 against 141 GFLOP/s for 64x3136x576): there each work-item
// walks A's rows in place, and row blocks vary fastest, so that the work-items reading the same
// columns of B run one after another while those columns are in cache.
// b_padded: B rows may be read up to the next multiple of 32 columns (im2col pads them).
#ifndef TM
#define TM 8
#endif
#define VN 32
#ifndef KT
#define KT 64
#endif
#ifndef WGN
#define WGN 4
#endif

inline REAL16 load16_guarded(__global const REAL *row, int n0, int N) {
    REAL tmp[16];
    for (int j = 0; j < 16; j++) tmp[j] = (n0 + j < N) ? row[n0 + j] : (REAL)0;
    return vload16(0, tmp);
}

inline void store16_guarded(__global REAL *row, int n0, int N, REAL16 v) {
    if (n0 + 16 <= N) { vstore16(v, 0, row + n0); return; }
    REAL tmp[16];
    vstore16(v, 0, tmp);
    for (int j = 0; j < 16 && n0 + j < N; j++) row[n0 + j] = tmp[j];
}

// The tile's rows (m0 + i < M) plus bias, stored where inside C.
inline void gemm_store(__global REAL *C, __global const REAL *bias, REAL16 *acc0, REAL16 *acc1, int m0, int n0,
                       int M, int N, int ldc, int g, int bias_mode) {
    for (int i = 0; i < TM && m0 + i < M; i++) {
        int m = m0 + i;
        REAL16 r0 = acc0[i], r1 = acc1[i];
        if (bias_mode == 1) { REAL16 b = (REAL16)(bias[g * M + m]); r0 += b; r1 += b; }
        if (bias_mode == 2) { r0 += load16_guarded(bias, n0, N); r1 += load16_guarded(bias, n0 + 16, N); }
        __global REAL *crow = C + (long)m * ldc;
        store16_guarded(crow, n0, N, r0);
        store16_guarded(crow, n0 + 16, N, r1);
    }
}

#define GEMM_ARGUMENTS __global const REAL *A, __global const REAL *B, __global REAL *C, __global const REAL *bias, \
    int M, int N, int K, int sam, int sak, int ldb, int ldc, int G, long a_g, long b_n, long b_g, long c_n, long c_g, \
    int bias_mode, int b_padded, long c_off
#define GEMM_BATCH int batch = get_global_id(2); int g = batch % G, nb = batch / G; \
    A += g * a_g; B += nb * b_n + g * b_g; C += c_off + nb * c_n + g * c_g
#define GEMM_ZERO REAL16 acc0[TM], acc1[TM]; \
    for (int i = 0; i < TM; i++) { acc0[i] = (REAL16)(0); acc1[i] = (REAL16)(0); }
#define GEMM_ROW(i, value) { REAL16 a = (REAL16)(value); acc0[i] = fma(a, b0, acc0[i]); acc1[i] = fma(a, b1, acc1[i]); }

#if LOCAL_PANEL
__attribute__((reqd_work_group_size(WGN, 1, 1)))
__attribute__((vec_type_hint(REAL16)))
__kernel void gemm(GEMM_ARGUMENTS) {
    GEMM_BATCH;
    int m0 = get_global_id(1) * TM, n0 = get_global_id(0) * VN, lid = get_local_id(0);
    bool vector_b = b_padded || n0 + VN <= N;
    __local REAL panel[KT][TM];
    GEMM_ZERO
    for (int k0 = 0; k0 < K; k0 += KT) {
        int kt = min(KT, K - k0);
        for (int e = lid; e < KT * TM; e += WGN) {  // along k first: A rows are read in order
            int i = e / KT, kk = e % KT;
            int m = min(m0 + i, M - 1);
            panel[kk][i] = kk < kt ? A[(long)m * sam + (long)(k0 + kk) * sak] : (REAL)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (n0 < N) {
            __global const REAL *brow = B + (long)k0 * ldb;
            for (int kk = 0; kk < kt; kk++, brow += ldb) {
                REAL16 b0, b1;
                if (vector_b) { b0 = vload16(0, brow + n0); b1 = vload16(0, brow + n0 + 16); }
                else { b0 = load16_guarded(brow, n0, N); b1 = load16_guarded(brow, n0 + 16, N); }
                for (int i = 0; i < TM; i++) GEMM_ROW(i, panel[kk][i])
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (n0 < N) gemm_store(C, bias, acc0, acc1, m0, n0, M, N, ldc, g, bias_mode);
}
#else
__attribute__((vec_type_hint(REAL16)))
__kernel void gemm(GEMM_ARGUMENTS) {
    GEMM_BATCH;
    int m0 = get_global_id(0) * TM, n0 = get_global_id(1) * VN;
    __global const REAL *arow[TM];  // rows past M repeat the last one (computed, never stored)
    for (int i = 0; i < TM; i++) arow[i] = A + (long)min(m0 + i, M - 1) * sam;
    __global const REAL *brow = B + n0;
    GEMM_ZERO
    if (b_padded || n0 + VN <= N) {
        for (int k = 0; k < K; k++, brow += ldb) {
            REAL16 b0 = vload16(0, brow), b1 = vload16(0, brow + 16);
            for (int i = 0; i < TM; i++) { GEMM_ROW(i, *arow[i]) arow[i] += sak; }
        }
    } else {
        for (int k = 0; k < K; k++, brow += ldb) {
            REAL16 b0 = load16_guarded(brow, 0, N - n0), b1 = load16_guarded(brow, 16, N - n0);
            for (int i = 0; i < TM; i++) { GEMM_ROW(i, *arow[i]) arow[i] += sak; }
        }
    }
    gemm_store(C, bias, acc0, acc1, m0, n0, M, N, ldc, g, bias_mode);
}
#endif

// ----------------------------------------------------------------------------- data movement
// out[out_off + (b, a, c)] = in[a, b, c]: transposes (C == 1) and moving the batch axis across the channels.
__kernel void swap01(__global const REAL *in, __global REAL *out, int A, int B, int Cn, long out_off) {
    int c = get_global_id(0), b = get_global_id(1), a = get_global_id(2);
    out[out_off + ((long)b * A + a) * Cn + c] = in[((long)a * B + b) * Cn + c];
}

// out[b] = sum over a, c of in[a, b, c] (bias gradients).
__kernel void sum02(__global const REAL *in, __global REAL *out, int A, int B, int Cn) {
    int b = get_global_id(0);
    REAL total = 0;
    for (int a = 0; a < A; a++) {
        __global const REAL *p = in + ((long)a * B + b) * Cn;
        for (int c = 0; c < Cn; c++) total += p[c];
    }
    out[b] = total;
}

// The source coordinate of padded coordinate q (q - before lies outside [0, size) in the border).
// mode: 0 zeros (-1: a zero), 1 reflect, 2 replicate, 3 circular.
inline int pad_source(int q, int size, int mode) {
    if (q >= 0 && q < size) return q;
    if (mode == 0) return -1;
    if (mode == 2) return clamp(q, 0, size - 1);
    if (mode == 3) return ((q % size) + size) % size;
    int period = 2 * (size - 1);
    if (period == 0) return 0;
    int f = ((q % period) + period) % period;
    return f < size ? f : period - f;
}

// xp[n, c, i, j] for i < Hp, j < Wpa: the input padded by (top, left) in `mode`; zeros past (Hp, Wp).
__kernel void pad2d(__global const REAL *x, __global REAL *xp, int H, int W, int Hp, int Wp, int Wpa,
                    int top, int left, int mode) {
    int j = get_global_id(0), i = get_global_id(1), plane = get_global_id(2);
    REAL v = 0;
    if (i < Hp && j < Wp) {
        int h = pad_source(i - top, H, mode), w = pad_source(j - left, W, mode);
        if (h >= 0 && w >= 0) v = x[((long)plane * H + h) * W + w];
    }
    xp[((long)plane * Hp + i) * Wpa + j] = v;
}

// Adjoint of pad2d along one axis: out[r, l, s] gathers in[r, q, s] over every q whose source is l.
__kernel void fold_axis(__global const REAL *in, __global REAL *out, int L, int Lp, int S, int before, int mode) {
    int s = get_global_id(0), l = get_global_id(1), r = get_global_id(2);
    __global const REAL *base = in + (long)r * Lp * S + s;
    REAL total = base[(long)(l + before) * S];
    if (mode != 0) {
        for (int q = 0; q < Lp; q++) {
            int inside = q - before;
            if (inside >= 0 && inside < L) { q = before + L - 1; continue; }
            if (pad_source(inside, L, mode) == l) total += base[(long)q * S];
        }
    }
    out[((long)r * L + l) * S + s] = total;
}

// col[g, k][n * P + p] from images n_first + n of the padded input xp[n, c, Hp, Wpa]: k = (c * KH + kh)
// * KW + kw over the group's channels, p = oh * OW + ow; the images are laid side by side, so that one
// product per group covers them. Rows are ldc >= N * P apart (columns past N * P are never written: the product reads
// them only into output lanes it does not store). A work-item copies one output row (k, n, oh),
// 16 columns at a time.
__attribute__((vec_type_hint(REAL16)))
__kernel void im2col(__global const REAL *xp, __global REAL *col, int n_first, int C, int Hp, int Wpa, int Cg, int KH, int KW,
                     int OH, int OW, int sh, int sw, int dh, int dw, int G, int ldc) {
    int oh = get_global_id(0), row = get_global_id(1);
    int Kg = Cg * KH * KW;
    int k = row % Kg, batch = row / Kg;
    int g = batch % G, n = batch / G;
    int kw = k % KW, kh = (k / KW) % KH, c = k / (KW * KH);
    __global const REAL *src = xp + (((long)(n_first + n) * C + g * Cg + c) * Hp + oh * sh + kh * dh) * Wpa + kw * dw;
    __global REAL *dst = col + ((long)g * Kg + k) * ldc + ((long)n * OH + oh) * OW;
    int ow = 0;
    if (sw == 1)
        for (; ow + 16 <= OW; ow += 16) vstore16(vload16(0, src + ow), 0, dst + ow);
    else if (sw == 2)
        for (; ow + 16 <= OW; ow += 16) {
            REAL16 lo = vload16(0, src + 2 * ow), hi = vload16(0, src + 2 * ow + 16);
            vstore16((REAL16)(lo.even, hi.even), 0, dst + ow);
        }
    for (; ow < OW; ow++) dst[ow] = src[ow * sw];
}

// colT[g][(n * P + p), k]: im2col transposed, the right-hand side of the weight gradient.
__kernel void im2col_t(__global const REAL *xp, __global REAL *colT, int N, int C, int Hp, int Wpa, int Cg,
                       int KH, int KW, int OH, int OW, int sh, int sw, int dh, int dw) {
    int k = get_global_id(0), np_ = get_global_id(1), g = get_global_id(2);
    int Kg = Cg * KH * KW, P = OH * OW;
    int n = np_ / P, p = np_ % P;
    int kw = k % KW, kh = (k / KW) % KH, c = k / (KW * KH);
    int oh = p / OW, ow = p % OW;
    colT[((long)g * N * P + np_) * Kg + k] =
        xp[(((long)n * C + g * Cg + c) * Hp + oh * sh + kh * dh) * Wpa + ow * sw + kw * dw];
}

// dxp[n, c, i, j] (padded grid Hp x Wp) gathers dcol[nb, g][k, p] over the taps that read (i, j).
__kernel void col2im(__global const REAL *dcol, __global REAL *dxp, int C, int Hp, int Wp, int Cg, int KH, int KW,
                     int OH, int OW, int sh, int sw, int dh, int dw, int G) {
    int j = get_global_id(0), i = get_global_id(1), plane = get_global_id(2);
    int n = plane / C, c = plane % C, g = c / Cg, cg = c % Cg;
    int P = OH * OW;
    __global const REAL *base = dcol + (((long)n * G + g) * Cg + cg) * KH * KW * P;
    REAL total = 0;
    for (int kh = 0; kh < KH; kh++) {
        int th = i - kh * dh;
        if (th < 0 || th % sh) continue;
        int oh = th / sh;
        if (oh >= OH) continue;
        for (int kw = 0; kw < KW; kw++) {
            int tw = j - kw * dw;
            if (tw < 0 || tw % sw) continue;
            int ow = tw / sw;
            if (ow >= OW) continue;
            total += base[(long)(kh * KW + kw) * P + oh * OW + ow];
        }
    }
    dxp[((long)plane * Hp + i) * Wp + j] = total;
}

// ----------------------------------------------------------------------------- direct convolution
// Each work-item: 16 consecutive output columns (one REAL16) x OB output channels of one group, one row,
// accumulated tap by tap. xp is padded (and wide enough that every vector load stays inside it).
// One body, inlined with OB constant: conv_direct16 / conv_direct4 / conv_direct1 (depthwise).
#define DIRECT_ARGUMENTS __global const REAL *xp, __global const REAL *w, __global const REAL *bias, __global REAL *y, \
    int C, int Hp, int Wpa, int O, int OH, int OW, int Cg, int Og, int KH, int KW, int sh, int sw, int dh, int dw, \
    int G, int has_bias
#define DIRECT_VALUES xp, w, bias, y, C, Hp, Wpa, O, OH, OW, Cg, Og, KH, KW, sh, sw, dh, dw, G, has_bias

inline void conv_direct_tile(DIRECT_ARGUMENTS, const int OB) {
    int ow0 = get_global_id(0) * 16, oh = get_global_id(1), item = get_global_id(2);
    int blocks = (Og + OB - 1) / OB;
    int ob = item % blocks, g = (item / blocks) % G, n = item / (blocks * G);
    int o0 = g * Og + ob * OB;
    int count = min(OB, Og - ob * OB);
    int taps = Cg * KH * KW;
    __global const REAL *wrow[16];  // the weights of each output channel (the last repeated past count)
    REAL16 acc[16];
    for (int j = 0; j < OB; j++) {
        wrow[j] = w + (long)(o0 + min(j, count - 1)) * taps;
        acc[j] = (REAL16)(0);
    }
    int tap = 0;
    for (int c = 0; c < Cg; c++) {
        __global const REAL *plane = xp + ((long)n * C + g * Cg + c) * Hp * Wpa + (long)oh * sh * Wpa + ow0 * sw;
        for (int kh = 0; kh < KH; kh++) {
            __global const REAL *row = plane + (long)kh * dh * Wpa;
            for (int kw = 0; kw < KW; kw++, tap++) {
                __global const REAL *p = row + kw * dw;
                REAL16 v;
                if (sw == 1) v = vload16(0, p);
                else if (sw == 2) { REAL16 lo = vload16(0, p), hi = vload16(0, p + 16); v = (REAL16)(lo.even, hi.even); }
                else { REAL t[16]; for (int l = 0; l < 16; l++) t[l] = p[l * sw]; v = vload16(0, t); }
                for (int j = 0; j < OB; j++) acc[j] = fma((REAL16)(wrow[j][tap]), v, acc[j]);
            }
        }
    }
    for (int j = 0; j < count; j++) {
        REAL16 r = acc[j];
        if (has_bias) r += (REAL16)(bias[o0 + j]);
        store16_guarded(y + (((long)n * O + o0 + j) * OH + oh) * OW, ow0, OW, r);
    }
}

__attribute__((vec_type_hint(REAL16))) __kernel void conv_direct16(DIRECT_ARGUMENTS) { conv_direct_tile(DIRECT_VALUES, 16); }
__attribute__((vec_type_hint(REAL16))) __kernel void conv_direct4(DIRECT_ARGUMENTS) { conv_direct_tile(DIRECT_VALUES, 4); }
__attribute__((vec_type_hint(REAL16))) __kernel void conv_direct1(DIRECT_ARGUMENTS) { conv_direct_tile(DIRECT_VALUES, 1); }

// ----------------------------------------------------------------------------- pooling
// Windows: taps start + t * d for t < k, kept where inside the input.
// The flat index (h * W + w) of the first maximum of window (oh, ow), as maxpool2d chose it.
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
            if (where < 0 || v > best || (isnan(v) && !isnan(best))) { best = v; where = h * W + ww; }
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
    dx[i] = x[i] > (REAL)0 ? dy[i] : (REAL)0;
}
