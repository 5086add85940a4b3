// conv2d "direct", fast: no im2col matrix, no bounds checks in the inner loop.
//
// 1. The input is copied once into a zero-padded buffer whose columns are split by phase (column % stride):
//    then, for every kernel tap, consecutive output columns read consecutive buffer elements, whatever
//    the stride and dilation (a stride-2 convolution reads two contiguous half-rows, not every other float).
// 2. The weights are repacked per group into blocks of OCB output channels, tap by tap.
// 3. Each OpenMP task computes one output row of one block of OCB channels, VW columns at a time:
//    OCB x VW accumulators (registers) each take one FMA per input channel and tap, the VW input
//    values loaded once for all OCB channels (`#pragma omp simd` vectorises the VW columns).
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>

#include "conv.hpp"

namespace {

// The zero-padded, phase-split copy of the input: image n, channel c, row r, phase p, position q is at
// data[((n * C + c) * rows + r) * stride_w * width + p * width + q] and holds input column q * sw + p - pl.
struct Buffer {
  int64_t rows = 0, width = 0;
  std::unique_ptr<float[]> data;

  const float* row(const Conv& conv, int64_t n, int64_t c, int64_t r) const {
    return data.get() + ((n * conv.c + c) * rows + r) * conv.sw * width;
  }
};

Buffer padded_input(const Conv& conv, const float* x, int64_t tile_columns) {
  Buffer buffer;
  buffer.rows = (conv.ho - 1) * conv.sh + (conv.kh - 1) * conv.dh + 1;
  buffer.width = tile_columns + (conv.kw - 1) * conv.dw / conv.sw;
  buffer.data.reset(new float[static_cast<size_t>(conv.n * conv.c * buffer.rows * conv.sw * buffer.width)]);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < conv.n; ++n) {
    for (int64_t c = 0; c < conv.c; ++c) {
      const float* plane = x + (n * conv.c + c) * conv.h * conv.w;
      for (int64_t r = 0; r < buffer.rows; ++r) {
        float* out = const_cast<float*>(buffer.row(conv, n, c, r));
        const int64_t ih = r - conv.pt;
        const bool inside = ih >= 0 && ih < conv.h;
        for (int64_t p = 0; p < conv.sw; ++p) {
          for (int64_t q = 0; q < buffer.width; ++q) {
            const int64_t iw = q * conv.sw + p - conv.pl;
            out[p * buffer.width + q] = inside && iw >= 0 && iw < conv.w ? plane[ih * conv.w + iw] : 0.0f;
          }
        }
      }
    }
  }
  return buffer;
}

// Weights as [group][block][input channel][kh][kw][OCB], channels past O / groups in the last block zero.
template <int OCB>
std::unique_ptr<float[]> packed_weights(const Conv& conv, const float* w, int64_t blocks) {
  const int64_t cg = conv.in_per_group(), og = conv.out_per_group(), taps = cg * conv.kh * conv.kw;
  std::unique_ptr<float[]> packed(new float[static_cast<size_t>(conv.groups * blocks * taps * OCB)]);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t g = 0; g < conv.groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      float* block = packed.get() + (g * blocks + b) * taps * OCB;
      for (int64_t t = 0; t < taps; ++t) {
        for (int k = 0; k < OCB; ++k) {
          const int64_t oc = b * OCB + k;
          block[t * OCB + k] = oc < og ? w[(g * og + oc) * taps + t] : 0.0f;
        }
      }
    }
  }
  return packed;
}

template <int OCB, int VW>
void run(const Conv& conv, const float* x, const float* w, const float* bias, float* y) {
  const int64_t cg = conv.in_per_group(), og = conv.out_per_group();
  const int64_t blocks = (og + OCB - 1) / OCB, tiles = (conv.wo + VW - 1) / VW;
  const Buffer input = padded_input(conv, x, tiles * VW);
  const std::unique_ptr<float[]> weights = packed_weights<OCB>(conv, w, blocks);
  const int64_t kh = conv.kh, kw = conv.kw, taps = cg * kh * kw, phase_stride = input.width;
#pragma omp parallel for collapse(4) schedule(static)
  for (int64_t n = 0; n < conv.n; ++n) {
    for (int64_t g = 0; g < conv.groups; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t oh = 0; oh < conv.ho; ++oh) {
          const float* block = weights.get() + (g * blocks + b) * taps * OCB;
          const int64_t first = g * og + b * OCB, count = std::min<int64_t>(OCB, og - b * OCB);
          for (int64_t t = 0; t < tiles; ++t) {
            float acc[OCB][VW];
            for (int k = 0; k < OCB; ++k) {
              const float start = bias && k < count ? bias[first + k] : 0.0f;
#pragma omp simd
              for (int v = 0; v < VW; ++v) acc[k][v] = start;
            }
            for (int64_t ic = 0; ic < cg; ++ic) {
              for (int64_t i = 0; i < kh; ++i) {
                const float* row = input.row(conv, n, g * cg + ic, oh * conv.sh + i * conv.dh) + t * VW;
                const float* tap_weights = block + (ic * kh + i) * kw * OCB;
                for (int64_t j = 0; j < kw; ++j) {
                  const int64_t column = j * conv.dw;
                  const float* in = row + (column % conv.sw) * phase_stride + column / conv.sw;
                  for (int k = 0; k < OCB; ++k) {
                    const float weight = tap_weights[j * OCB + k];
#pragma omp simd
                    for (int v = 0; v < VW; ++v) acc[k][v] += weight * in[v];
                  }
                }
              }
            }
            const int64_t columns = std::min<int64_t>(VW, conv.wo - t * VW);
            for (int64_t k = 0; k < count; ++k) {
              float* out = y + ((n * conv.o + first + k) * conv.ho + oh) * conv.wo + t * VW;
              for (int64_t v = 0; v < columns; ++v) out[v] = acc[k][v];
            }
          }
        }
      }
    }
  }
}

// Output channels per step: as many as the group has, up to 8 (measured: 16 channels x 8 columns ran 40 times
// slower with GCC 12).
int channels_per_step(const Conv& conv) {
  const int64_t og = conv.out_per_group();
  int ocb = 1;
  while (ocb * 2 <= 8 && ocb * 2 <= og) ocb *= 2;
  return ocb;
}

// Output columns per step (measured with GCC 12 on AVX-512: 8 columns ran 5 to 10 times slower per column, even on
// 7-wide outputs, where 16 waste 9 of them)
constexpr int COLUMNS = 16;

const char* instruction_set() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__ARM_NEON)
  return "NEON";
#else
  return "baseline SIMD";
#endif
}

}  // namespace

void conv2d_direct(const Conv& conv, const float* x, const float* w, const float* bias, float* y) {
  switch (channels_per_step(conv)) {
    case 8: return run<8, COLUMNS>(conv, x, w, bias, y);
    case 4: return run<4, COLUMNS>(conv, x, w, bias, y);
    case 2: return run<2, COLUMNS>(conv, x, w, bias, y);
    default: return run<1, COLUMNS>(conv, x, w, bias, y);
  }
}

std::string kernel_name(const Conv& conv) {
  return "cppconv direct, " + std::to_string(channels_per_step(conv)) + " channels x " +
         std::to_string(COLUMNS) + " columns per step, phase-split padded input, " + instruction_set() +
         ", OpenMP " + std::to_string(omp_get_max_threads()) + " threads";
}
