// Part of the SYCL backend's program (kernels/matmul.cl says how it is built).
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

// p[0], p[s], ..., p[15 s] for a stride s of 1 or 2.
inline REAL16 strided16(__global const REAL *p, int s) {
    if (s == 1) return vload16(0, p);
    REAL16 lo = vload16(0, p), hi = vload16(0, p + 16);
    return (REAL16)(lo.even, hi.even);
}

// xs[n, c, ph, pw, i, j] (ph < nph, pw < npw, i < Hq, j < Wq) = xp[i * sh + ph, j * sw + pw]: the input padded
// by (top, left) in `mode` (zeros past (Hp, Wp)), split into the first nph x npw phases of a stride (the ones
// the taps read; strides 1: the padded input, rows Wq apart). A work-item writes one row: its inside 16
// elements at a time (strides 1 and 2), its border element by element.
__attribute__((vec_type_hint(REAL16)))
__kernel void pad2d(__global const REAL *x, __global REAL *xs, int H, int W, int Hp, int Wp, int Hq, int Wq,
                    int top, int left, int mode, int sh, int sw, int nph, int npw) {
    int i = get_global_id(0), row = get_global_id(1);
    int plane = row / (nph * npw), ph = row / npw % nph, pw = row % npw;
    __global REAL *dst = xs + ((long)row * Hq + i) * Wq;
    int h = i * sh + ph < Hp ? pad_source(i * sh + ph - top, H, mode) : -1;
    if (h < 0) {
        for (int j = 0; j < Wq; j++) dst[j] = (REAL)0;
        return;
    }
    __global const REAL *src = x + ((long)plane * H + h) * W;
    int j = 0;
    for (; j < Wq && j * sw + pw < left; j++) { int w = pad_source(j * sw + pw - left, W, mode); dst[j] = w < 0 ? (REAL)0 : src[w]; }
    if (sw <= 2)  // 16 outputs at a time while their loads stay inside the row
        for (; j + 16 <= Wq && (j + 16) * sw + pw - left <= W - sw + 1; j += 16) vstore16(strided16(src + j * sw + pw - left, sw), 0, dst + j);
    for (; j < Wq; j++) {
        int from = j * sw + pw - left;
        if (from < 0 || from >= W) from = j * sw + pw < Wp ? pad_source(from, W, mode) : -1;
        dst[j] = from < 0 ? (REAL)0 : src[from];
    }
}

// col[batch][j][k][32] (batch = n * G + g, images n_first + n of the padded input xp[N, C, Hp, Wpa]): the
// group's im2col matrix, rows k = (c * KH + kh) * KW + kw, columns q = oh * OW + ow, in panels j of 32
// columns (zeros past OH * OW): the matrix product's B, read panel by panel. A work-item fills IM2COL_ROWS
// rows of a panel, 16 columns at a time: vector loads where the 16 lie in one output row or in two (output
// rows of 16 or more, strides 1 and 2), else element by element.
#define IM2COL_ROWS 8
__attribute__((vec_type_hint(REAL16)))
__kernel void im2col(__global const REAL *xp, __global REAL *col, int n_first, int C, int Hp, int Wpa, int Cg, int KH,
                     int KW, int OH, int OW, int sh, int sw, int dh, int dw, int G) {
    int k0 = get_global_id(0) * IM2COL_ROWS, j = get_global_id(1), batch = get_global_id(2);
    int Kg = Cg * KH * KW, P = OH * OW, panels = (P + 31) / 32;
    int g = batch % G, n = batch / G;
    const MASK16 lanes = (MASK16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __global const REAL *image = xp + ((long)(n_first + n) * C + g * Cg) * Hp * Wpa;
    __global REAL *dst = col + (((long)batch * panels + j) * Kg + k0) * 32;
    for (int k = k0; k < min(k0 + IM2COL_ROWS, Kg); k++, dst += 32) {
        int kw = k % KW, kh = (k / KW) % KH, c = k / (KW * KH);
        __global const REAL *plane = image + ((long)c * Hp + kh * dh) * Wpa + kw * dw;
        for (int part = 0; part < 32; part += 16) {
            int q = j * 32 + part, oh = q / OW, ow = q - oh * OW;
            __global const REAL *src = plane + (long)oh * sh * Wpa + ow * sw;
            bool vector = q + 16 <= P && sw <= 2 && OW >= 16;
            if (vector && ow + 16 <= OW && (sw == 1 || 2 * (ow + 16) + kw * dw <= Wpa)) {  // loads inside the row
                vstore16(strided16(src, sw), 0, dst + part);
            } else if (vector && ow + 16 > OW) {  // the first `rest` from this output row, the others from the next
                int rest = OW - ow;
                REAL16 next = strided16(plane + (long)(oh + 1) * sh * Wpa - rest * sw, sw);
                vstore16(select(next, strided16(src, sw), lanes < (MASK16)(rest)), 0, dst + part);
            } else {
                for (int e = 0; e < 16; e++, q++, ow++) {
                    if (ow == OW) { ow = 0; oh++; }
                    dst[part + e] = q < P ? plane[(long)oh * sh * Wpa + ow * sw] : (REAL)0;
                }
            }
        }
    }
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

