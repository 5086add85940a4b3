// Convolution (cross-correlation, NCHW input, OIHW weight): direct, and the im2col half of smm (gemm.metal has the
// product). Every padding mode is read in place through source_index: no padded copy of the input is made. A tap in
// the zero padding multiplies a 0 (0 * inf is NaN, as in PyTorch), so it is never skipped.

// One thread per output element; its taps in (channel, row, column) order, one fma each.
kernel void conv2d_direct(device const float* x [[buffer(0)]],
                          device const float* weight [[buffer(1)]],
                          device const float* bias [[buffer(2)]],
                          device const float* residual [[buffer(3)]],
                          device float* y [[buffer(4)]],
                          constant ConvParams& p [[buffer(5)]],
                          uint index [[thread_position_in_grid]]) {
    const int i = int(index);
    if (i >= p.n * p.o * p.oh * p.ow) {
        return;
    }
    const int ox = i % p.ow, oy = i / p.ow % p.oh, oc = i / (p.ow * p.oh) % p.o, image = i / (p.ow * p.oh * p.o);
    const int first = oc / (p.o / p.groups) * p.cg;  // the group's first input channel
    float acc = 0.0f;
    for (int ci = 0; ci < p.cg; ++ci) {
        device const float* plane = x + (image * p.c + first + ci) * p.h * p.w;
        device const float* taps = weight + (oc * p.cg + ci) * p.kh * p.kw;
        for (int ky = 0; ky < p.kh; ++ky) {
            const int iy = source_index(oy * p.sh - p.top + ky * p.dh, p.h, p.mode);
            for (int kx = 0; kx < p.kw; ++kx) {
                const int ix = source_index(ox * p.sw - p.left + kx * p.dw, p.w, p.mode);
                const float v = iy >= 0 && ix >= 0 ? plane[iy * p.w + ix] : 0.0f;
                acc = fma(v, taps[ky * p.kw + kx], acc);
            }
        }
    }
    y[i] = finish(acc, bias, oc, residual, i, p.has_bias, p.has_residual, p.activation);
}

// The im2col matrix of every (image, group): col[image][group][k][pixel], k = (channel, ky, kx) of the group's
// input channels, pixel = oy * ow + ox. Grid: (pixels, k, images x groups).
kernel void im2col(device const float* x [[buffer(0)]],
                   device float* col [[buffer(1)]],
                   constant ConvParams& p [[buffer(2)]],
                   uint3 position [[thread_position_in_grid]]) {
    const int pixel = int(position.x), k = int(position.y), z = int(position.z);
    const int pixels = p.oh * p.ow, rows = p.cg * p.kh * p.kw;
    if (pixel >= pixels || k >= rows || z >= p.n * p.groups) {
        return;
    }
    const int image = z / p.groups, group = z % p.groups;
    const int kx = k % p.kw, ky = k / p.kw % p.kh, ci = k / (p.kw * p.kh);
    const int ox = pixel % p.ow, oy = pixel / p.ow;
    const int iy = source_index(oy * p.sh - p.top + ky * p.dh, p.h, p.mode);
    const int ix = source_index(ox * p.sw - p.left + kx * p.dw, p.w, p.mode);
    device const float* plane = x + (image * p.c + group * p.cg + ci) * p.h * p.w;
    col[(z * rows + k) * pixels + pixel] = iy >= 0 && ix >= 0 ? plane[iy * p.w + ix] : 0.0f;
}
