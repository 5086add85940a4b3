// Scans for NaN and infinity. oneDNN's kernels treat them as they happen to fall (its max, relu and
// softmax drop or spread NaN where PyTorch does not), so the ops that differ check their inputs with
// one cheap pass over the bits and take an exact path only when something is not finite.
#include <cstring>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

constexpr int64_t PARALLEL_FROM = int64_t(1) << 16;  // elements; below, a thread team costs more than it saves

// The bit patterns of a float type: the exponent field, and everything but the sign.
template <typename Bits>
struct Format;
template <>
struct Format<uint32_t> {
    static constexpr uint32_t exponent = 0x7f800000u, magnitude = 0x7fffffffu;
};
template <>
struct Format<uint16_t> {  // bfloat16: the upper half of a float32
    static constexpr uint16_t exponent = 0x7f80u, magnitude = 0x7fffu;
};

// Whether some element has all exponent bits set (infinity or NaN), or (nan_only) is a NaN.
template <typename Bits>
bool any_special(const Bits *bits, int64_t count, bool nan_only) {
    constexpr Bits exponent = Format<Bits>::exponent, magnitude = Format<Bits>::magnitude;
    Bits hit = 0;
    if (nan_only) {
#pragma omp parallel for reduction(| : hit) schedule(static) if (count >= PARALLEL_FROM)
        for (int64_t i = 0; i < count; ++i) hit |= static_cast<Bits>((bits[i] & magnitude) > exponent);
    } else {
#pragma omp parallel for reduction(| : hit) schedule(static) if (count >= PARALLEL_FROM)
        for (int64_t i = 0; i < count; ++i) hit |= static_cast<Bits>((bits[i] & exponent) == exponent);
    }
    return hit != 0;
}

bool scan(const void *data, dt type, int64_t count, bool nan_only) {
    std::optional<py::gil_scoped_release> nogil;
    if (count >= PARALLEL_FROM && PyGILState_Check()) nogil.emplace();
    if (type == dt::bf16) return any_special(static_cast<const uint16_t *>(data), count, nan_only);
    return any_special(static_cast<const uint32_t *>(data), count, nan_only);
}

template <typename Bits>
void copy_nan(const Bits *from, Bits *to, int64_t count) {
    constexpr Bits exponent = Format<Bits>::exponent, magnitude = Format<Bits>::magnitude;
#pragma omp parallel for schedule(static) if (count >= PARALLEL_FROM)
    for (int64_t i = 0; i < count; ++i)
        if ((from[i] & magnitude) > exponent) to[i] = from[i];
}

}  // namespace

bool all_finite(const void *data, dt type, int64_t count) { return !scan(data, type, count, false); }

bool any_nan(const void *data, dt type, int64_t count) { return scan(data, type, count, true); }

void restore_nan(const void *from, void *to, dt type, int64_t count) {
    if (type == dt::bf16)
        copy_nan(static_cast<const uint16_t *>(from), static_cast<uint16_t *>(to), count);
    else
        copy_nan(static_cast<const uint32_t *>(from), static_cast<uint32_t *>(to), count);
}

void init_finite(py::module_ &m) {
    m.def("all_finite",
          [](py::handle x) {
              Tensor t = check_float(x, "all_finite", "input");
              return all_finite(t.data, t.type, numel(t.shape));
          },
          "Whether every element of a C-contiguous float32 or bfloat16 array is finite (one parallel pass).",
          py::arg("input"));
}

}  // namespace algoswap_dnnl
