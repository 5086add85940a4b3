// Part of the SYCL backend's program (kernels/matmul.cl says how it is built).
// ----------------------------------------------------------------------------- direct convolution
// y[n, o, oh, ow] = sum over k = (c, kh, kw) of w[o, k] * xs[n, g * Cg][offs[k] + oh * Wq + ow] (+ bias): the
// tiled matrix product of kernels/matmul.cl with its B read straight from the input, padded and split into
// the phases of the stride (pad2d), so that every row k of B is contiguous: column q = oh * Wq + ow, row k
// at offset offs[k] (channel c's phases, the tap's phase, row and column). The columns with ow >= OW are
// computed and dropped. Each work-item: TM output channels x 32 columns; xs has slack past its end for the
// vector loads of the last tiles.

// Columns q .. q + 15 of an output plane (rows Wq apart in column space, OW apart in the output).
inline void store_columns(__global REAL *plane, REAL16 v, int q, int OH, int OW, int Wq) {
    int oh = q / Wq, ow = q - oh * Wq;
    if (oh < OH && (ow + 16 <= OW || (Wq == OW && q + 16 <= OH * OW))) {
        vstore16(v, 0, plane + oh * OW + ow);
        return;
    }
    REAL tmp[16];
    vstore16(v, 0, tmp);
    for (int e = 0; e < 16; e++, ow++) {
        if (ow == Wq) { ow = 0; oh++; }
        if (ow < OW && oh < OH) plane[oh * OW + ow] = tmp[e];
    }
}

__attribute__((vec_type_hint(REAL16)))
__kernel void conv_direct(__global const REAL *xs, __global const REAL *w, __global const REAL *bias, __global REAL *y,
                          __global const int *offs, int C, int Cg, long cstride, int O, int Og, int OH, int OW, int Wq,
                          int K, int G, int has_bias) {
    int batch = get_global_id(2), g = batch % G, n = batch / G;
    int m0 = get_global_id(0) * TM, q0 = get_global_id(1) * VN;
    __global const REAL *xc = xs + ((long)n * C + g * Cg) * cstride + q0;
    __global const REAL *arow[TM];  // rows past Og repeat the last one (computed, never stored)
    for (int i = 0; i < TM; i++) arow[i] = w + (long)(g * Og + min(m0 + i, Og - 1)) * K;
    GEMM_ZERO
    for (int k = 0; k < K; k++) {
        __global const REAL *brow = xc + offs[k];
        REAL16 b0 = vload16(0, brow), b1 = vload16(0, brow + 16);
        for (int i = 0; i < TM; i++) { GEMM_ROW(i, *arow[i]) arow[i]++; }
    }
    for (int i = 0; i < TM && m0 + i < Og; i++) {
        int o = g * Og + m0 + i;
        REAL16 add = (REAL16)(has_bias ? bias[o] : (REAL)0);
        __global REAL *plane = y + ((long)n * O + o) * OH * OW;
        store_columns(plane, acc0[i] + add, q0, OH, OW, Wq);
        store_columns(plane, acc1[i] + add, q0 + 16, OH, OW, Wq);
    }
}
