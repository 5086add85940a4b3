// Element-wise kernels: one thread per element of a contiguous array.

kernel void relu(device const float* x [[buffer(0)]],
                 device float* y [[buffer(1)]],
                 constant CountParams& p [[buffer(2)]],
                 uint index [[thread_position_in_grid]]) {
    if (int(index) < p.count) {
        y[index] = activate(x[index], ACT_RELU);
    }
}

// a + b for operands of one shape (broadcasting stays with other backends).
kernel void add(device const float* a [[buffer(0)]],
                device const float* b [[buffer(1)]],
                device float* y [[buffer(2)]],
                constant CountParams& p [[buffer(3)]],
                uint index [[thread_position_in_grid]]) {
    if (int(index) < p.count) {
        y[index] = a[index] + b[index];
    }
}
