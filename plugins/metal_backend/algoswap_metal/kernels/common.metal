// What every kernel of algoswap_metal shares: the parameter blocks, the padding modes and the fused activations.
// The kernels/*.metal files are compiled as one library, this file first (algoswap_metal/metal/_launch.py: SOURCES).
#include <metal_stdlib>
using namespace metal;

// Each kernel's parameters arrive in one small buffer of 32-bit ints, its last argument. algoswap_metal/metal/_params.py
// packs them field by field in this order (LAYOUTS there; tests/test_metal_kernels.py checks the two agree).
struct ConvParams {
    int n, c, h, w;               // input
    int o, cg, kh, kw;            // weight: o output channels, cg input channels per group
    int oh, ow, groups;           // output rows and columns, groups
    int sh, sw, dh, dw;           // stride, dilation
    int top, left, mode;          // padding before the first row and column, padding mode (PAD_*)
    int has_bias, has_residual, activation;
};

struct GemmParams {
    int m, n, k, groups;          // per (batch, group): C (m x n) = A (m x k) B (k x n), all row-major
    int a_group, b_batch, b_group, c_batch, c_group;  // element offsets between groups and batches
    int has_bias, has_residual, activation;           // bias: one per row of C (of each group)
};

struct PoolParams {
    int planes, h, w, oh, ow;     // planes: batch x channels
    int kh, kw, sh, sw, ph, pw, dh, dw;
};

struct CountParams {
    int count;
};

constant int PAD_ZEROS = 0;
constant int PAD_REFLECT = 1;
constant int PAD_REPLICATE = 2;
constant int PAD_CIRCULAR = 3;

// The source coordinate of padded coordinate i along an axis of `size` elements, or -1 where the padding is a zero.
inline int source_index(int i, int size, int mode) {
    if (i >= 0 && i < size) {
        return i;
    }
    if (mode == PAD_ZEROS) {
        return -1;
    }
    if (mode == PAD_REPLICATE) {
        return i < 0 ? 0 : size - 1;
    }
    if (mode == PAD_CIRCULAR) {
        return (i % size + size) % size;
    }
    if (size == 1) {
        return 0;
    }
    const int period = 2 * (size - 1);  // PAD_REFLECT, folded as often as the padding needs
    const int folded = (i % period + period) % period;
    return folded < size ? folded : period - folded;
}

constant int ACT_NONE = 0;
constant int ACT_RELU = 1;
constant int ACT_RELU6 = 2;
constant int ACT_SILU = 3;
constant int ACT_HARDSWISH = 4;

// The fused activations, NaN and infinities as PyTorch has them (comparisons, not min and max, which drop a NaN).
inline float activate(float v, int kind) {
    if (kind == ACT_RELU) {
        return v > 0.0f || isnan(v) ? v : 0.0f;
    }
    if (kind == ACT_RELU6) {
        return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
    }
    if (kind == ACT_SILU) {
        const float e = exp(-fabs(v));  // sigmoid from exp(-|v|): no overflow; silu(-inf) = -inf * 0 = NaN
        return v * (v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));
    }
    if (kind == ACT_HARDSWISH) {
        const float gate = v + 3.0f;
        return v * (gate < 0.0f ? 0.0f : (gate > 6.0f ? 6.0f : gate)) / 6.0f;
    }
    return v;
}

// The epilogue of a convolution or product: bias, then the residual, then the activation.
inline float finish(float acc, device const float* bias, int channel, device const float* residual, int at,
                    int has_bias, int has_residual, int activation) {
    if (has_bias != 0) {
        acc += bias[channel];
    }
    if (has_residual != 0) {
        acc += residual[at];
    }
    return activate(acc, activation);
}
