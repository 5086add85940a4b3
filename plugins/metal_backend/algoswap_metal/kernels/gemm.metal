// The tiled matrix product: each threadgroup of SIDE x SIDE threads computes a TILE x TILE block of C, staging
// TILE x DEPTH panels of A and DEPTH x TILE panels of B in threadgroup memory; each thread keeps PER x PER
// accumulators (rows ty + SIDE * i, columns tx + SIDE * j: neighbouring threads store neighbouring columns).
// Grid: (column tiles x SIDE, row tiles x SIDE, batches x groups) threads in groups of (SIDE, SIDE, 1); a
// threadgroup must be whole (algoswap_metal/metal/_launch.py rounds the grid up), as the panel loads use every thread.

constant int TILE = 32;
constant int DEPTH = 8;
constant int SIDE = 8;
constant int PER = 4;  // TILE / SIDE

kernel void gemm(device const float* a [[buffer(0)]],
                 device const float* b [[buffer(1)]],
                 device const float* bias [[buffer(2)]],
                 device const float* residual [[buffer(3)]],
                 device float* c [[buffer(4)]],
                 constant GemmParams& p [[buffer(5)]],
                 uint3 tile [[threadgroup_position_in_grid]],
                 uint3 local [[thread_position_in_threadgroup]]) {
    threadgroup float a_panel[TILE][DEPTH];
    threadgroup float b_panel[DEPTH][TILE];
    const int batch = int(tile.z) / p.groups, group = int(tile.z) % p.groups;
    const int row0 = int(tile.y) * TILE, col0 = int(tile.x) * TILE;
    const int tx = int(local.x), ty = int(local.y), t = ty * SIDE + tx;
    device const float* ag = a + group * p.a_group;
    device const float* bg = b + batch * p.b_batch + group * p.b_group;
    float acc[PER][PER];
    for (int i = 0; i < PER; ++i) {
        for (int j = 0; j < PER; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (int k0 = 0; k0 < p.k; k0 += DEPTH) {
        for (int e = t; e < TILE * DEPTH; e += SIDE * SIDE) {
            const int r = e / DEPTH, kk = e % DEPTH, row = row0 + r, k = k0 + kk;
            a_panel[r][kk] = row < p.m && k < p.k ? ag[row * p.k + k] : 0.0f;
        }
        for (int e = t; e < DEPTH * TILE; e += SIDE * SIDE) {
            const int kk = e / TILE, cc = e % TILE, k = k0 + kk, col = col0 + cc;
            b_panel[kk][cc] = k < p.k && col < p.n ? bg[k * p.n + col] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int kk = 0; kk < DEPTH; ++kk) {
            float av[PER];
            float bv[PER];
            for (int i = 0; i < PER; ++i) {
                av[i] = a_panel[ty + SIDE * i][kk];
                bv[i] = b_panel[kk][tx + SIDE * i];
            }
            for (int i = 0; i < PER; ++i) {
                for (int j = 0; j < PER; ++j) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    device float* cg = c + batch * p.c_batch + group * p.c_group;
    device const float* rg = residual + batch * p.c_batch + group * p.c_group;
    for (int i = 0; i < PER; ++i) {
        const int row = row0 + ty + SIDE * i;
        for (int j = 0; j < PER; ++j) {
            const int col = col0 + tx + SIDE * j;
            if (row < p.m && col < p.n) {
                cg[row * p.n + col] = finish(acc[i][j], bias, group * p.m + row, rg, row * p.n + col,
                                             p.has_bias, p.has_residual, p.activation);
            }
        }
    }
}
