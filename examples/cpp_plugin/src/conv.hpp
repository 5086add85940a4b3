// The kernels' interface: src/module.cpp checks the arrays and calls these; src/conv.cpp defines them.
#pragma once

#include <cstdint>
#include <string>

// One convolution: the sizes of its NCHW input, OIHW weight and NCHW output, and its attributes.
struct Conv {
  int64_t n = 0, c = 0, h = 0, w = 0;   // input (N, C, H, W)
  int64_t o = 0, kh = 0, kw = 0;        // weight (O, C / groups, KH, KW)
  int64_t ho = 0, wo = 0;               // output (N, O, Ho, Wo)
  int64_t sh = 1, sw = 1;               // stride
  int64_t pt = 0, pl = 0;               // padding at the top and at the left (with zeros)
  int64_t dh = 1, dw = 1;               // dilation
  int64_t groups = 1;

  int64_t in_per_group() const { return c / groups; }
  int64_t out_per_group() const { return o / groups; }
};

// y = conv(x, w) + bias over C-contiguous float32 arrays (bias: O values, or nullptr). Taps that fall
// outside the input read zeros; every output element is written.
void conv2d_direct(const Conv& conv, const float* x, const float* w, const float* bias, float* y);

// What conv2d_direct runs for a convolution of these weight and output sizes and attributes (h and w unset).
std::string kernel_name(const Conv& conv);
