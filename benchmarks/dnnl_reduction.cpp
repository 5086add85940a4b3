// oneDNN 3.2's reduction primitive (reduction_sum, float32, plain layouts): the kernel it picks and
// its time, for the reductions algoswap's ops need. Why algoswap-dnnl declares reduce_sum,
// reduce_mean and sum_to_shape unsupported, and sums bias gradients with NumPy.
//
//   .venv/bin/pip install onednn-devel-cpu-gomp==2023.2.0      # the headers
//   g++ -O2 -std=c++17 -I.venv/include benchmarks/dnnl_reduction.cpp -L.venv/lib -ldnnl \
//       -Wl,-rpath,$PWD/.venv/lib -o /tmp/dnnl_reduction && OMP_NUM_THREADS=2 /tmp/dnnl_reduction
//   .venv/bin/python -c "import numpy as np, timeit; x = np.random.rand(64, 256, 56, 56).astype(np.float32);
//       print(timeit.timeit(lambda: x.sum(axis=(0, 2, 3)), number=3) / 3 * 1e3, 'ms')"   # and the others
//
// Measured here (2 shared cores, OMP_NUM_THREADS=2), oneDNN vs numpy.sum:
//   over (N, H, W) of 64x256x56x56   ref:any               1316 ms   vs 16.6 ms
//   over the rows of 4096x1024        ref:any                155 ms   vs 1.2 ms
//   over the columns of 4096x1024     jit:avx512_core_fp16   2.4 ms   vs 0.8 ms
//   of all of 64x256x56x56            jit:avx512_core_fp16    18 ms   vs 15 ms
#include <chrono>
#include <cstdio>
#include <vector>
#include "oneapi/dnnl/dnnl.hpp"
using namespace dnnl;
using dims = memory::dims;
static memory::desc dense(const dims &s) {
    dims st(s.size(), 1);
    for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return memory::desc(s, memory::data_type::f32, st);
}
int main() {
    engine eng(engine::kind::cpu, 0);
    stream strm(eng);
    struct Case { dims src, dst; const char *name; };
    std::vector<Case> cases = {
        {{64, 256, 56, 56}, {1, 256, 1, 1}, "sum over N,H,W of 64x256x56x56 (bias grad)"},
        {{4096, 1024}, {1, 1024}, "sum over rows of 4096x1024"},
        {{4096, 1024}, {4096, 1}, "sum over columns of 4096x1024"},
        {{64, 256, 56, 56}, {1, 1, 1, 1}, "sum of all of 64x256x56x56"},
    };
    for (auto &c : cases) {
        auto src = dense(c.src), dst = dense(c.dst);
        reduction::primitive_desc pd(eng, algorithm::reduction_sum, src, dst, 0.f, 0.f);
        memory s(src, eng), d(dst, eng);
        float *p = (float *)s.get_data_handle();
        size_t n = src.get_size() / 4;
        for (size_t i = 0; i < n; ++i) p[i] = (float)(i % 7);
        reduction r(pd);
        r.execute(strm, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, d}});
        strm.wait();
        int reps = 3;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) r.execute(strm, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, d}});
        strm.wait();
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
        printf("%s: %s %.2f ms\n", c.name, pd.impl_info_str(), ms);
    }
}
