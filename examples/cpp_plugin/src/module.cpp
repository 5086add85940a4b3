// The Python module algoswap_cppconv._kernels: checks the arrays it is given, then runs src/conv.cpp's kernel.
//
// Every array is a py::array_t<float, py::array::c_style> taken with .noconvert(): an array of another
// dtype or memory order is refused with a TypeError instead of being copied silently (or, for `out`,
// instead of the result going to a copy nobody reads).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <optional>
#include <stdexcept>
#include <string>

#include "conv.hpp"

namespace py = pybind11;
using Array = py::array_t<float, py::array::c_style>;
using Pair = std::array<int64_t, 2>;

namespace {

std::string shape_text(const Array& a) {
  std::string text = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) text += (i ? ", " : "") + std::to_string(a.shape(i));
  return text + (a.ndim() == 1 ? ",)" : ")");
}

void expect(bool ok, const std::string& argument, const Array& a, const std::string& expected) {
  if (!ok) throw std::invalid_argument("conv2d: argument '" + argument + "' has shape " + shape_text(a) + "; expected " + expected);
}

Conv attributes(Pair stride, Pair padding, Pair dilation, int64_t groups) {
  if (stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 || padding[0] < 0 || padding[1] < 0 || groups < 1)
    throw std::invalid_argument("conv2d: stride, dilation and groups must be positive and padding non-negative");
  Conv conv;
  conv.sh = stride[0], conv.sw = stride[1], conv.pt = padding[0], conv.pl = padding[1];
  conv.dh = dilation[0], conv.dw = dilation[1], conv.groups = groups;
  return conv;
}

// The sizes of x, w, out (and bias) as one Conv; std::invalid_argument (ValueError) where they disagree.
Conv checked(const Array& x, const Array& w, const std::optional<Array>& bias, const Array& out, Conv conv) {
  expect(x.ndim() == 4, "input", x, "(N, C, H, W)");
  expect(w.ndim() == 4, "weight", w, "(O, C / groups, KH, KW)");
  conv.n = x.shape(0), conv.c = x.shape(1), conv.h = x.shape(2), conv.w = x.shape(3);
  conv.o = w.shape(0), conv.kh = w.shape(2), conv.kw = w.shape(3);
  const std::string groups = " (groups=" + std::to_string(conv.groups) + ")";
  expect(w.shape(1) * conv.groups == conv.c && conv.o % conv.groups == 0, "weight", w,
         "weight.shape[1] * groups == input channels (" + std::to_string(conv.c) + ") and O divisible by groups" + groups);
  expect(out.ndim() == 4 && out.shape(0) == conv.n && out.shape(1) == conv.o, "out", out,
         "(" + std::to_string(conv.n) + ", " + std::to_string(conv.o) + ", Ho, Wo)");
  conv.ho = out.shape(2), conv.wo = out.shape(3);
  if (bias) expect(bias->ndim() == 1 && bias->shape(0) == conv.o, "bias", *bias, "(" + std::to_string(conv.o) + ",)");
  return conv;
}

void conv2d(const Array& x, const Array& w, const std::optional<Array>& bias, Array& out, Pair stride, Pair padding,
            Pair dilation, int64_t groups) {
  const Conv conv = checked(x, w, bias, out, attributes(stride, padding, dilation, groups));
  float* y = out.mutable_data();  // raises if `out` is read-only
  const float* b = bias ? bias->data() : nullptr;
  py::gil_scoped_release unlocked;
  conv2d_direct(conv, x.data(), w.data(), b, y);
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "conv2d kernels of the algoswap backend cppconv";
  m.def("conv2d", &conv2d, py::arg("input").noconvert(), py::arg("weight").noconvert(),
        py::arg("bias").none(true).noconvert(), py::arg("out").noconvert(), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("groups"),
        "out = conv2d(input, weight) + bias over C-contiguous float32 NCHW arrays (bias may be None); "
        "padding: (top, left) rows and columns of zeros; out's spatial size sets the bottom and right ones");
  m.def(
      "kernel_name",
      [](std::array<int64_t, 4> weight, std::array<int64_t, 4> output, Pair stride, Pair dilation, int64_t groups) {
        Conv conv = attributes(stride, {0, 0}, dilation, groups);
        conv.o = weight[0], conv.c = weight[1] * groups, conv.kh = weight[2], conv.kw = weight[3];
        conv.n = output[0], conv.ho = output[2], conv.wo = output[3];
        return kernel_name(conv);
      },
      py::arg("weight_shape"), py::arg("output_shape"), py::arg("stride"), py::arg("dilation"), py::arg("groups"),
      "what conv2d runs for a weight and an output of these shapes and these attributes");
}
