// OpenCL C kernels of the algoswap SYCL backend: kernels/*.cl are built as one program (_device.py SOURCES),
// once per device and dtype: REAL is float or double (-DREAL=...). Arrays are C-contiguous NCHW / row-major.
// dpctl ranges list dimensions slowest first: get_global_id(0) is the LAST entry of the range.

#define REAL16 CAT(REAL, 16)
#define REAL8 CAT(REAL, 8)
#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b

// ----------------------------------------------------------------------------- matrix product
// C[m, n] = sum_k A[m*sam + k*sak] * B(k, n) (+ bias), batched over get_global_id(2) = nb*G + g; C starts
// c_off elements into its buffer. B is stored in panels of pv columns, pstride elements apart, with rows
// ldb elements apart inside a panel: B(k, n) = B[(n / pv) * pstride + k * ldb + n % pv]. A plain row-major
// B is one panel (pv = N, ldb its row length); im2col writes panels of 32 columns (pv = ldb = 32,
// pstride = 32 K), which the product reads in order: 10-20% faster than rows of B thousands of elements
// apart (a B row per k, each on its own page).
// Each work-item keeps a TM x 32 register tile (two REAL16 per row) of one panel: B rows are read with
// vload16, A values are broadcast. With LOCAL_PANEL (devices whose local memory is on-chip: GPUs), the
// work-group's WGN work-items share one TM x KT panel of A staged in local memory. On a CPU device
// local memory is ordinary cached memory, and the barriers staging needs cost more than they save
// (measured on the OpenCL CPU device: 38 against 141 GFLOP/s for 64x3136x576): there each work-item
// walks A's rows in place, and row blocks vary fastest, so that the work-items reading the same
// columns of B run one after another while those columns are in cache.
// b_padded: panel rows may be read up to the next multiple of 32 columns (im2col pads them with zeros).
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
    int M, int N, int K, int sam, int sak, int ldb, int pv, long pstride, int ldc, int G, long a_g, long b_n, long b_g, \
    long c_n, long c_g, int bias_mode, int b_padded, long c_off
#define GEMM_BATCH int batch = get_global_id(2); int g = batch % G, nb = batch / G; \
    A += g * a_g; B += nb * b_n + g * b_g; C += c_off + nb * c_n + g * c_g
// Column tile t: columns [n0, n_end) of C, the VN columns from `inner` on in panel `panel` of B.
#define GEMM_TILE(t) int tiles = (pv + VN - 1) / VN, panel = (t) / tiles, inner = ((t) % tiles) * VN; \
    int n0 = panel * pv + inner, n_end = min(n0 + min(VN, pv - inner), N); \
    B += panel * pstride + inner
#define GEMM_ZERO REAL16 acc0[TM], acc1[TM]; \
    for (int i = 0; i < TM; i++) { acc0[i] = (REAL16)(0); acc1[i] = (REAL16)(0); }
#define GEMM_ROW(i, value) { REAL16 a = (REAL16)(value); acc0[i] = fma(a, b0, acc0[i]); acc1[i] = fma(a, b1, acc1[i]); }

#if LOCAL_PANEL
__attribute__((reqd_work_group_size(WGN, 1, 1)))
__attribute__((vec_type_hint(REAL16)))
__kernel void gemm(GEMM_ARGUMENTS) {
    GEMM_BATCH;
    GEMM_TILE(get_global_id(0));
    int m0 = get_global_id(1) * TM, lid = get_local_id(0);
    bool vector_b = b_padded || n0 + VN <= n_end;
    __local REAL panel_a[KT][TM];
    GEMM_ZERO
    for (int k0 = 0; k0 < K; k0 += KT) {
        int kt = min(KT, K - k0);
        for (int e = lid; e < KT * TM; e += WGN) {  // along k first: A rows are read in order
            int i = e / KT, kk = e % KT;
            int m = min(m0 + i, M - 1);
            panel_a[kk][i] = kk < kt ? A[(long)m * sam + (long)(k0 + kk) * sak] : (REAL)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (n0 < n_end) {
            __global const REAL *brow = B + (long)k0 * ldb;
            for (int kk = 0; kk < kt; kk++, brow += ldb) {
                REAL16 b0, b1;
                if (vector_b) { b0 = vload16(0, brow); b1 = vload16(0, brow + 16); }
                else { b0 = load16_guarded(brow, 0, n_end - n0); b1 = load16_guarded(brow, 16, n_end - n0); }
                for (int i = 0; i < TM; i++) GEMM_ROW(i, panel_a[kk][i])
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (n0 < n_end) gemm_store(C, bias, acc0, acc1, m0, n0, M, n_end, ldc, g, bias_mode);
}
#else
__attribute__((vec_type_hint(REAL16)))
__kernel void gemm(GEMM_ARGUMENTS) {
    GEMM_BATCH;
    GEMM_TILE(get_global_id(1));
    if (n0 >= n_end) return;
    int m0 = get_global_id(0) * TM;
    __global const REAL *arow[TM];  // rows past M repeat the last one (computed, never stored)
    for (int i = 0; i < TM; i++) arow[i] = A + (long)min(m0 + i, M - 1) * sam;
    __global const REAL *brow = B;
    GEMM_ZERO
    if (b_padded || n0 + VN <= n_end) {
        for (int k = 0; k < K; k++, brow += ldb) {
            REAL16 b0 = vload16(0, brow), b1 = vload16(0, brow + 16);
            for (int i = 0; i < TM; i++) { GEMM_ROW(i, *arow[i]) arow[i] += sak; }
        }
    } else {
        for (int k = 0; k < K; k++, brow += ldb) {
            REAL16 b0 = load16_guarded(brow, 0, n_end - n0), b1 = load16_guarded(brow, 16, n_end - n0);
            for (int i = 0; i < TM; i++) { GEMM_ROW(i, *arow[i]) arow[i] += sak; }
        }
    }
    gemm_store(C, bias, acc0, acc1, m0, n0, M, n_end, ldc, g, bias_mode);
}
#endif
