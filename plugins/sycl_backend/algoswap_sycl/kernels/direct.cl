// Part of the SYCL backend's program (kernels/matmul.cl says how it is built).
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

