// Scans for NaN and infinity. oneDNN's kernels treat them as they happen to fall (its max, relu and
// softmax drop or spread NaN where PyTorch does not), so the ops that differ check their inputs with
// one cheap pass over the bits and take an exact path only when something is not finite.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

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

// Whether some element has all exponent bits set (infinity or NaN), or (nan_only) is a NaN. The masked
// bits are below 2**31 as signed integers too, so the comparisons vectorize (pcmpgtd/pcmpeqd, por);
// target_clones builds AVX2 and AVX-512 versions beside the baseline, chosen when the library loads.
template <typename Bits, typename Signed>
inline Signed special_in(const Bits *bits, int64_t count, bool nan_only) {
    constexpr Signed exponent = Format<Bits>::exponent, magnitude = Format<Bits>::magnitude;
    Signed hit = 0;
    if (nan_only) {
#pragma omp simd reduction(| : hit)
        for (int64_t i = 0; i < count; ++i) hit |= static_cast<Signed>(static_cast<Signed>(bits[i] & magnitude) > exponent);
    } else {
#pragma omp simd reduction(| : hit)
        for (int64_t i = 0; i < count; ++i) hit |= static_cast<Signed>(static_cast<Signed>(bits[i] & exponent) == exponent);
    }
    return hit;
}

#define ALGOSWAP_CLONES __attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))
ALGOSWAP_CLONES int32_t special_block(const uint32_t *bits, int64_t count, bool nan_only) {
    return special_in<uint32_t, int32_t>(bits, count, nan_only);
}
ALGOSWAP_CLONES int16_t special_block(const uint16_t *bits, int64_t count, bool nan_only) {
    return special_in<uint16_t, int16_t>(bits, count, nan_only);
}
ALGOSWAP_CLONES int32_t largest_magnitude_bits(const uint32_t *bits, int64_t count) {
    int32_t largest = 0;
#pragma omp simd reduction(max : largest)
    for (int64_t i = 0; i < count; ++i) largest = std::max(largest, static_cast<int32_t>(bits[i] & 0x7fffffffu));
    return largest;
}
ALGOSWAP_CLONES int16_t largest_magnitude_bits(const uint16_t *bits, int64_t count) {
    int16_t largest = 0;
#pragma omp simd reduction(max : largest)
    for (int64_t i = 0; i < count; ++i) largest = std::max(largest, static_cast<int16_t>(bits[i] & 0x7fffu));
    return largest;
}

template <typename Bits>
bool any_special(const Bits *bits, int64_t count, bool nan_only) {
    using Signed = std::conditional_t<sizeof(Bits) == 4, int32_t, int16_t>;
    if (count < PARALLEL_FROM) return special_block(bits, count, nan_only) != 0;
    constexpr int64_t block = 1 << 14;
    Signed hit = 0;
#pragma omp parallel for reduction(| : hit) schedule(static)
    for (int64_t start = 0; start < count; start += block)
        hit |= special_block(bits + start, std::min(block, count - start), nan_only);
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

// to[i] = from[i] wherever from[i] >= threshold (a positive float, as bits): non-negative floats,
// +inf and NaNs with a clear sign bit order as their bits do; negative ones are negative as signed integers.
template <typename Bits>
void copy_from_threshold(const Bits *from, Bits *to, int64_t count, Bits threshold) {
    using Signed = std::make_signed_t<Bits>;
#pragma omp parallel for schedule(static) if (count >= PARALLEL_FROM)
    for (int64_t i = 0; i < count; ++i)
        if (static_cast<Signed>(from[i]) >= static_cast<Signed>(threshold)) to[i] = from[i];
}

}  // namespace

bool all_finite(const void *data, dt type, int64_t count) { return !scan(data, type, count, false); }

bool any_nan(const void *data, dt type, int64_t count) { return scan(data, type, count, true); }

float max_magnitude(const void *data, dt type, int64_t count) {
    // Non-negative floats order as their bits do; NaN and infinity have the largest (exponent all ones).
    uint32_t bits = type == dt::bf16
                        ? uint32_t(uint16_t(largest_magnitude_bits(static_cast<const uint16_t *>(data), count))) << 16
                        : uint32_t(largest_magnitude_bits(static_cast<const uint32_t *>(data), count));
    if ((bits & 0x7f800000u) == 0x7f800000u) return std::numeric_limits<float>::infinity();
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

void restore_nan(const void *from, void *to, dt type, int64_t count) {
    if (type == dt::bf16)
        copy_nan(static_cast<const uint16_t *>(from), static_cast<uint16_t *>(to), count);
    else
        copy_nan(static_cast<const uint32_t *>(from), static_cast<uint32_t *>(to), count);
}

void restore_at_least(const void *from, void *to, dt type, int64_t count, float threshold) {
    uint32_t bits;
    std::memcpy(&bits, &threshold, sizeof bits);
    if (type == dt::bf16)
        copy_from_threshold(static_cast<const uint16_t *>(from), static_cast<uint16_t *>(to), count, uint16_t(bits >> 16));
    else
        copy_from_threshold(static_cast<const uint32_t *>(from), static_cast<uint32_t *>(to), count, bits);
}

void init_finite(py::module_ &m) {
    m.def("all_finite",
          [](py::handle x) {
              Tensor t = check_float(x, "all_finite", "input");
              return all_finite(t.data, t.type, numel(t.shape));
          },
          "Whether every element of a C-contiguous float32 or bfloat16 array is finite (one parallel pass).",
          py::arg("input"));
    m.def("max_magnitude",
          [](py::handle x) {
              Tensor t = check_float(x, "max_magnitude", "input");
              int64_t count = numel(t.shape);
              std::optional<py::gil_scoped_release> nogil;
              if (count >= PARALLEL_FROM) nogil.emplace();
              return max_magnitude(t.data, t.type, count);
          },
          "The largest |element| of a C-contiguous float32 or bfloat16 array (inf if one is NaN or infinite; 0 if empty).",
          py::arg("input"));
}

}  // namespace algoswap_dnnl
