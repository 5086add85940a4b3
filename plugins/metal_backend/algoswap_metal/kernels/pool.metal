// Pooling over NCHW planes.

// One thread per output element; padding and the windows past the input (ceil_mode) count as -inf. A NaN wins
// its window, as in PyTorch.
kernel void maxpool2d(device const float* x [[buffer(0)]],
                      device float* y [[buffer(1)]],
                      constant PoolParams& p [[buffer(2)]],
                      uint index [[thread_position_in_grid]]) {
    const int i = int(index);
    if (i >= p.planes * p.oh * p.ow) {
        return;
    }
    const int ox = i % p.ow, oy = i / p.ow % p.oh, plane = i / (p.ow * p.oh);
    device const float* source = x + plane * p.h * p.w;
    float best = -INFINITY;
    for (int ky = 0; ky < p.kh; ++ky) {
        const int iy = oy * p.sh - p.ph + ky * p.dh;
        for (int kx = 0; kx < p.kw; ++kx) {
            const int ix = ox * p.sw - p.pw + kx * p.dw;
            if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) {
                const float v = source[iy * p.w + ix];
                best = v > best || isnan(v) ? v : best;
            }
        }
    }
    y[i] = best;
}

// The mean of each plane (adaptive average pooling to 1 x 1): one SIMD-group of 32 threads per plane, each summing
// every 32nd element, then simd_sum. Grid: planes x 32 threads in groups of 32.
kernel void global_avgpool(device const float* x [[buffer(0)]],
                           device float* y [[buffer(1)]],
                           constant PoolParams& p [[buffer(2)]],
                           uint plane [[threadgroup_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]]) {
    if (int(plane) >= p.planes) {
        return;  // the whole SIMD-group: it leaves simd_sum to none of its threads
    }
    const int length = p.h * p.w;
    device const float* source = x + int(plane) * length;
    float sum = 0.0f;
    for (int e = int(lane); e < length; e += 32) {
        sum += source[e];
    }
    sum = simd_sum(sum);
    if (lane == 0) {
        y[plane] = sum / float(length);
    }
}
