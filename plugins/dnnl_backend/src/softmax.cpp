// softmax and log_softmax along one axis (softmax_accurate / softmax_log), forward and backward.
// An array of any rank is seen as (outer, axis, inner), or (outer, axis) when nothing follows the axis.
#include <cmath>
#include <limits>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using pk = dnnl::prop_kind;

struct Softmax {
    dims x;  // (outer, n) or (outer, n, inner): the axis is dimension 1
    bool log;

    const char *name() const { return log ? "log_softmax" : "softmax"; }
    dnnl::algorithm algo() const { return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate; }
    memory::desc data() const { return dense(x); }
    dnnl::softmax_forward::primitive_desc forward(pk prop, const dnnl::primitive_attr &attr) const {
        return dnnl::softmax_forward::primitive_desc(cpu_engine(), prop, algo(), data(), data(), 1, attr);
    }
};

Softmax parse(const dims &shape, int64_t axis, bool log) {
    const char *op = log ? "log_softmax" : "softmax";
    auto rank = static_cast<int64_t>(shape.size());
    if (rank < 1 || axis < -rank || axis >= rank)
        throw py::value_error(std::string("algoswap_dnnl ") + op + ": axis " + std::to_string(axis) + " is out of range for a " +
                              std::to_string(rank) + "-D array");
    if (axis < 0) axis += rank;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
    for (int64_t i = axis + 1; i < rank; ++i) inner *= shape[i];
    dims x = inner == 1 ? dims{outer, shape[axis]} : dims{outer, shape[axis], inner};
    return Softmax{x, log};
}

PlanPtr forward_plan(const Softmax &s) {
    return cached_plan(make_key(s.name(), {s.x}), [&] {
        Plan p{dnnl::softmax_forward(s.forward(pk::forward_inference, user_scratchpad()))};
        p.bind(DNNL_ARG_SRC, 0, false, s.data());
        p.bind(DNNL_ARG_DST, 1, true, s.data());
        return p;
    });
}

PlanPtr backward_plan(const Softmax &s) {
    return cached_plan(make_key((std::string(s.name()) + "_grad").c_str(), {s.x}), [&] {
        auto hint = s.forward(pk::forward_training, dnnl::primitive_attr());
        dnnl::softmax_backward::primitive_desc pd(cpu_engine(), s.algo(), s.data(), s.data(), s.data(), 1, hint,
                                                  user_scratchpad());
        Plan p{dnnl::softmax_backward(pd)};
        p.bind(DNNL_ARG_DIFF_DST, 0, false, s.data());
        p.bind(DNNL_ARG_DST, 1, false, s.data());
        p.bind(DNNL_ARG_DIFF_SRC, 2, true, s.data());
        return p;
    });
}

// ---- Inputs that are not all finite (checked first), treated as PyTorch does: a row (along the axis)
// holding a NaN or +inf, or only -inf, is NaN throughout; -inf elements of other rows give exactly 0
// (softmax) or -inf (log_softmax). oneDNN leaves the other elements of such rows finite.

// Calls visit(offset of the row's first element, stride between its elements) for every row.
template <typename F>
void for_each_row(const Softmax &s, F &&visit) {
    int64_t n = s.x[1], inner = s.x.size() == 3 ? s.x[2] : 1;
    for (int64_t o = 0; o < s.x[0]; ++o)
        for (int64_t j = 0; j < inner; ++j) visit(o * n * inner + j, inner);
}

void exact_rows(const Softmax &s, const float *x, float *y) {
    py::gil_scoped_release nogil;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity(), minus_inf = -inf;
    int64_t n = s.x[1];
    for_each_row(s, [&](int64_t start, int64_t stride) {
        bool undefined = true;  // only -inf so far
        for (int64_t i = 0; i < n; ++i) {
            float v = x[start + i * stride];
            if (std::isnan(v) || v == inf) {
                undefined = true;
                break;
            }
            undefined = undefined && v == minus_inf;
        }
        for (int64_t i = 0; i < n; ++i) {
            int64_t at = start + i * stride;
            if (undefined) y[at] = nan;
            else if (x[at] == minus_inf) y[at] = s.log ? minus_inf : 0.f;
        }
    });
}

// PyTorch's gradients y * (dy - sum(dy * y)) (softmax) and dy - exp(y) * sum(dy) (log_softmax) along
// each row, where oneDNN's result is not all finite. One scan of that result (just written) finds every
// case that needs it: a non-finite grad_output makes its row's sum, and so some element, non-finite; a
// NaN or +inf output gives NaN or an infinity where it stands. (-inf in y, from -inf inputs, gives the
// finite dy, as oneDNN computes too.)
void exact_backward(const Softmax &s, const float *dy, const float *y, float *dx) {
    py::gil_scoped_release nogil;
    int64_t n = s.x[1];
    for_each_row(s, [&](int64_t start, int64_t stride) {
        float total = 0.f;
        for (int64_t i = 0; i < n; ++i) total += s.log ? dy[start + i * stride] : dy[start + i * stride] * y[start + i * stride];
        for (int64_t i = 0; i < n; ++i) {
            int64_t at = start + i * stride;
            dx[at] = s.log ? dy[at] - std::exp(y[at]) * total : y[at] * (dy[at] - total);
        }
    });
}

py::array_t<float> forward(py::handle x, int64_t axis, bool log) {
    const char *op = log ? "log_softmax" : "softmax";
    return guarded(op, [&] {
        F32 X = check_f32(x, op, "input");
        Softmax s = parse(X.shape, axis, log);
        auto out = empty_f32(X.shape);
        if (numel(X.shape) == 0) return out;
        forward_plan(s)->run({X.data, out.mutable_data()});
        if (!all_finite(X.data, dt::f32, numel(X.shape))) exact_rows(s, X.data, out.mutable_data());
        return out;
    });
}

py::array_t<float> backward(py::handle dy, py::handle y, int64_t axis, bool log) {
    const char *op = log ? "log_softmax_grad" : "softmax_grad";
    return guarded(op, [&] {
        F32 DY = check_f32(dy, op, "grad_output"), Y = check_f32(y, op, "output");
        if (DY.shape != Y.shape) throw py::value_error(std::string("algoswap_dnnl ") + op + ": grad_output and output shapes differ");
        Softmax s = parse(Y.shape, axis, log);
        auto out = empty_f32(Y.shape);
        if (numel(Y.shape) == 0) return out;
        backward_plan(s)->run({DY.data, Y.data, out.mutable_data()});
        if (!all_finite(out.data(), dt::f32, numel(Y.shape))) exact_backward(s, DY.data, Y.data, out.mutable_data());
        return out;
    });
}

}  // namespace

void init_softmax(py::module_ &m) {
    m.def("softmax", [](py::handle x, int64_t axis, bool log) { return forward(x, axis, log); },
          "softmax (log=False: softmax_accurate) or log_softmax (log=True: softmax_log) along axis.", py::arg("input"),
          py::arg("axis") = -1, py::arg("log") = false);
    m.def("softmax_grad", [](py::handle dy, py::handle y, int64_t axis, bool log) { return backward(dy, y, axis, log); },
          "Gradient of softmax / log_softmax from its output.", py::arg("grad_output"), py::arg("output"),
          py::arg("axis") = -1, py::arg("log") = false);
    m.def("softmax_impl",
          [](const std::vector<int64_t> &x, int64_t axis, bool log) {
              return guarded(log ? "log_softmax" : "softmax", [&] { return info(forward_plan(parse(as_dims(x), axis, log))); });
          },
          "impl_info_str() of the primitive softmax runs.", py::arg("input_size"), py::arg("axis") = -1, py::arg("log") = false);
    m.def("softmax_grad_impl",
          [](const std::vector<int64_t> &x, int64_t axis, bool log) {
              return guarded(log ? "log_softmax_grad" : "softmax_grad",
                             [&] { return info(backward_plan(parse(as_dims(x), axis, log))); });
          },
          "impl_info_str() of the primitive softmax_grad runs.", py::arg("input_size"), py::arg("axis") = -1,
          py::arg("log") = false);
}

}  // namespace algoswap_dnnl
