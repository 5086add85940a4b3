// Max and average pooling, forward and backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using V = std::vector<int64_t>;
using pk = dnnl::prop_kind;
using pool_fwd = dnnl::pooling_forward;

struct Pool {
    dims x, y, kernel, stride, dilation, pad_l, pad_r;  // dilation in oneDNN's convention (torch's - 1)
    dnnl::algorithm algo;
    std::string kind;
    float scale;  // applied to the output as an eltwise_linear post-op when not 1
    bool channels_last = false;  // the caller's input and output are in NHWC memory order (forward only)
    dt type = dt::f32;           // forward only: float32 or bfloat16

    std::string key(const char *op) const {
        return make_key(op, {x, kernel, stride, dilation, pad_l, pad_r},
                        kind + "/" + std::to_string(scale) + (channels_last ? "/nhwc/" : "/nchw/") + type_name(type));
    }
    memory::desc src() const { return plain(x, channels_last ? tag::nhwc : tag::nchw, type); }
    memory::desc dst() const { return plain(y, channels_last ? tag::nhwc : tag::nchw, type); }
    pool_fwd::primitive_desc forward(pk prop, dnnl::primitive_attr attr) const {
        if (scale != 1.f) {
            dnnl::post_ops ops;
            ops.append_eltwise(dnnl::algorithm::eltwise_linear, scale, 0.f);
            attr.set_post_ops(ops);
        }
        return pool_fwd::primitive_desc(cpu_engine(), prop, algo, src(), dst(), stride, kernel, dilation, pad_l, pad_r, attr);
    }
};

Pool parse(const dims &x, const V &kernel, const V &stride, const V &dilation, const V &pad_l, const V &pad_r,
           const std::string &kind, float scale) {
    const char *where = "algoswap_dnnl pool2d: ";
    if (x.size() != 4) throw py::value_error(std::string(where) + "input must be 4-D (NCHW)");
    if (kernel.size() != 2 || stride.size() != 2 || dilation.size() != 2 || pad_l.size() != 2 || pad_r.size() != 2)
        throw py::value_error(std::string(where) + "kernel, stride, dilation, padding_l and padding_r need 2 entries each");
    dnnl::algorithm algo;
    if (kind == "max") algo = dnnl::algorithm::pooling_max;
    else if (kind == "avg_include") algo = dnnl::algorithm::pooling_avg_include_padding;
    else if (kind == "avg_exclude") algo = dnnl::algorithm::pooling_avg_exclude_padding;
    else throw py::value_error(std::string(where) + "kind must be 'max', 'avg_include' or 'avg_exclude', got '" + kind + "'");
    Pool p{x, {x[0], x[1], 0, 0}, as_dims(kernel), as_dims(stride), {dilation[0] - 1, dilation[1] - 1},
           as_dims(pad_l), as_dims(pad_r), algo, kind, scale};
    for (int i = 0; i < 2; ++i) {
        int64_t span = x[2 + i] + pad_l[i] + pad_r[i] - (dilation[i] * (kernel[i] - 1) + 1);
        if (span < 0 || stride[i] < 1) throw py::value_error(std::string(where) + "the window does not fit in the padded input");
        p.y[2 + i] = span / stride[i] + 1;
    }
    return p;
}

Plan make_forward(const Pool &p, bool training) {
    Plan plan(pool_fwd(p.forward(training ? pk::forward_training : pk::forward_inference, user_scratchpad())));
    plan.bind(DNNL_ARG_SRC, 0, false, p.src());
    plan.bind(DNNL_ARG_DST, 1, true, p.dst());
    if (training) plan.bind(DNNL_ARG_WORKSPACE, 2, true, plan.arg_md(DNNL_ARG_WORKSPACE));
    return plan;
}

Plan make_backward(const Pool &p) {
    auto hint = p.forward(pk::forward_training, dnnl::primitive_attr());
    dnnl::pooling_backward::primitive_desc pd(cpu_engine(), p.algo, p.src(), p.dst(), p.stride, p.kernel, p.dilation,
                                              p.pad_l, p.pad_r, hint, user_scratchpad());
    Plan plan{dnnl::pooling_backward(pd)};
    plan.bind(DNNL_ARG_DIFF_DST, 0, false, p.dst());
    plan.bind(DNNL_ARG_DIFF_SRC, 1, true, p.src());
    if (p.kind == "max") plan.bind(DNNL_ARG_WORKSPACE, 2, false, plan.arg_md(DNNL_ARG_WORKSPACE));
    return plan;
}

PlanPtr forward_plan(const Pool &p) { return cached_plan(p.key("pool2d"), [&] { return make_forward(p, false); }); }
PlanPtr training_plan(const Pool &p) { return cached_plan(p.key("pool2d_training"), [&] { return make_forward(p, true); }); }
PlanPtr backward_plan(const Pool &p) { return cached_plan(p.key("pool2d_grad"), [&] { return make_backward(p); }); }

// ---- PyTorch's max pooling where the input is not all finite (oneDNN's max drops NaN, and its
// windows of -inf or of padding only give -FLT_MAX). Each window's maximum is its first largest
// element in row-major order, or its last NaN; a window with no element in the input gives -inf.

// The input rows (or columns) a window starting at output position o reads: first, step, count.
struct Taps {
    int64_t first, step, count;
};
Taps taps(const Pool &p, int axis, int64_t o) {
    int64_t step = p.dilation[axis] + 1, start = o * p.stride[axis] - p.pad_l[axis], extent = p.x[2 + axis];
    int64_t skip = start < 0 ? (-start + step - 1) / step : 0, count = 0;
    for (int64_t k = skip; k < p.kernel[axis] && start + k * step < extent; ++k) ++count;
    return {start + skip * step, step, count};
}

float as_float(float v) { return v; }
float as_float(uint16_t bf16) {
    uint32_t bits = uint32_t(bf16) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}
template <typename Value>
Value minus_infinity();
template <>
float minus_infinity<float>() { return -std::numeric_limits<float>::infinity(); }
template <>
uint16_t minus_infinity<uint16_t>() { return 0xff80u; }

// Offsets of element (n, c, h, w) of an activation of logical shape s in NCHW or NHWC memory.
int64_t offset(const dims &s, bool channels_last, int64_t n, int64_t c, int64_t h, int64_t w) {
    return channels_last ? ((n * s[2] + h) * s[3] + w) * s[1] + c : ((n * s[1] + c) * s[2] + h) * s[3] + w;
}

// For each output element (n, c, oh, ow) in NCHW order: the input offset of its maximum, or -1.
template <typename Value>
std::vector<int64_t> argmax(const Pool &p, const Value *x) {
    std::vector<int64_t> found(static_cast<size_t>(numel(p.y)), -1);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < p.y[0]; ++n)
        for (int64_t c = 0; c < p.y[1]; ++c)
            for (int64_t oh = 0; oh < p.y[2]; ++oh)
                for (int64_t ow = 0; ow < p.y[3]; ++ow) {
                    Taps rows = taps(p, 0, oh), cols = taps(p, 1, ow);
                    float best = -std::numeric_limits<float>::infinity();
                    int64_t at = rows.count && cols.count ? offset(p.x, p.channels_last, n, c, rows.first, cols.first) : -1;
                    for (int64_t i = 0; i < rows.count; ++i)
                        for (int64_t j = 0; j < cols.count; ++j) {
                            int64_t o = offset(p.x, p.channels_last, n, c, rows.first + i * rows.step, cols.first + j * cols.step);
                            float v = as_float(x[o]);
                            if (v > best || std::isnan(v)) best = v, at = o;
                        }
                    found[static_cast<size_t>(((n * p.y[1] + c) * p.y[2] + oh) * p.y[3] + ow)] = at;
                }
    return found;
}

template <typename Value>
void exact_max(const Pool &p, const Value *x, Value *y) {
    std::vector<int64_t> at = argmax(p, x);
    for (int64_t n = 0, i = 0; n < p.y[0]; ++n)
        for (int64_t c = 0; c < p.y[1]; ++c)
            for (int64_t oh = 0; oh < p.y[2]; ++oh)
                for (int64_t ow = 0; ow < p.y[3]; ++ow, ++i)
                    y[offset(p.y, p.channels_last, n, c, oh, ow)] = at[i] < 0 ? minus_infinity<Value>() : x[at[i]];
}

void exact_max_forward(const Pool &p, const void *x, void *y) {
    py::gil_scoped_release nogil;
    if (p.type == dt::bf16)
        exact_max(p, static_cast<const uint16_t *>(x), static_cast<uint16_t *>(y));
    else
        exact_max(p, static_cast<const float *>(x), static_cast<float *>(y));
}

// The gradient of each output goes to the input element it took (none for an empty window).
void exact_max_backward(const Pool &p, const float *x, const float *dy, float *dx) {
    py::gil_scoped_release nogil;
    std::vector<int64_t> at = argmax(p, x);
    std::fill(dx, dx + numel(p.x), 0.f);
    for (size_t i = 0; i < at.size(); ++i)
        if (at[i] >= 0) dx[at[i]] += dy[i];
}

// Which output rows (axis 0) or columns (axis 1) have windows wholly in the padding (ceil_mode,
// dilation): oneDNN gives them -FLT_MAX where PyTorch gives -inf, and its backward no place to go.
std::vector<char> empty_windows(const Pool &p, int axis) {
    std::vector<char> empty(static_cast<size_t>(p.y[2 + axis]));
    for (int64_t o = 0; o < p.y[2 + axis]; ++o) empty[o] = taps(p, axis, o).count == 0;
    return empty;
}

bool has_empty_windows(const Pool &p) {
    for (int axis = 0; axis < 2; ++axis) {
        std::vector<char> empty = empty_windows(p, axis);
        if (std::find(empty.begin(), empty.end(), 1) != empty.end()) return true;
    }
    return false;
}

// With a finite input oneDNN's only departure is at those windows: set them to -inf.
void empty_windows_to_minus_infinity(const Pool &p, void *y) {
    if (!has_empty_windows(p)) return;
    std::vector<char> empty_row = empty_windows(p, 0), empty_col = empty_windows(p, 1);
    for (int64_t n = 0; n < p.y[0]; ++n)
        for (int64_t c = 0; c < p.y[1]; ++c)
            for (int64_t oh = 0; oh < p.y[2]; ++oh)
                for (int64_t ow = 0; ow < p.y[3]; ++ow) {
                    if (!empty_row[oh] && !empty_col[ow]) continue;
                    int64_t o = offset(p.y, p.channels_last, n, c, oh, ow);
                    if (p.type == dt::bf16)
                        static_cast<uint16_t *>(y)[o] = minus_infinity<uint16_t>();
                    else
                        static_cast<float *>(y)[o] = minus_infinity<float>();
                }
}

py::array forward(py::handle x, const V &kernel, const V &stride, const V &dilation, const V &pad_l,
                  const V &pad_r, const std::string &kind, float scale, bool channels_last) {
    return guarded("pool2d", [&] {
        Tensor X = check_float(x, "pool2d", "input");
        dims shape = X.shape;
        if (channels_last && shape.size() == 4) shape = {X.shape[0], X.shape[3], X.shape[1], X.shape[2]};
        Pool p = parse(shape, kernel, stride, dilation, pad_l, pad_r, kind, scale);
        p.channels_last = channels_last;
        p.type = X.type;
        py::array out = empty_like_type(X, channels_last ? dims{p.y[0], p.y[2], p.y[3], p.y[1]} : p.y);
        if (p.kind == "max" && !all_finite(X.data, X.type, numel(X.shape))) {
            exact_max_forward(p, X.data, out.mutable_data());
            return out;
        }
        forward_plan(p)->run({X.data, out.mutable_data()});
        if (p.kind == "max") empty_windows_to_minus_infinity(p, out.mutable_data());
        return out;
    });
}

// Max pooling needs the forward pass's workspace (where each maximum was): it is recomputed from input.
py::array_t<float> backward(py::handle dy, py::handle x, const V &input_size, const V &kernel, const V &stride,
                            const V &dilation, const V &pad_l, const V &pad_r, const std::string &kind) {
    return guarded("pool2d_grad", [&] {
        F32 DY = check_f32(dy, "pool2d_grad", "grad_output");
        Pool p = parse(as_dims(input_size), kernel, stride, dilation, pad_l, pad_r, kind, 1.f);
        if (DY.shape != p.y) throw py::value_error("algoswap_dnnl pool2d_grad: grad_output has the wrong shape");
        auto out = empty_f32(p.x);
        if (kind != "max") {
            backward_plan(p)->run({DY.data, out.mutable_data()});
            return out;
        }
        if (x.is_none()) throw py::value_error("algoswap_dnnl pool2d_grad: max pooling needs the forward input");
        F32 X = check_f32(x, "pool2d_grad", "input");
        if (X.shape != p.x) throw py::value_error("algoswap_dnnl pool2d_grad: input does not match input_size");
        if (!all_finite(X.data, dt::f32, numel(X.shape)) || has_empty_windows(p)) {
            exact_max_backward(p, X.data, DY.data, out.mutable_data());
            return out;
        }
        PlanPtr train = training_plan(p), back = backward_plan(p);
        const memory::desc &written = train->slot_of(DNNL_ARG_WORKSPACE)->prim_md;
        if (written != back->slot_of(DNNL_ARG_WORKSPACE)->prim_md)
            throw DnnlError("oneDNN pool2d_grad: the forward and backward primitives disagree on the workspace layout");
        std::vector<char> workspace(written.get_size());
        std::vector<float> y(static_cast<size_t>(p.y[0] * p.y[1] * p.y[2] * p.y[3]));
        train->run({X.data, y.data(), workspace.data()});
        back->run({DY.data, out.mutable_data(), workspace.data()});
        return out;
    });
}

}  // namespace

void init_pool(py::module_ &m) {
    m.def("pool2d_forward", &forward,
          "Max or average pooling of an NCHW array (NHWC if channels_last, output likewise); dilation as in torch; "
          "the output is multiplied by scale.",
          py::arg("input"), py::arg("kernel"), py::arg("stride"), py::arg("dilation"), py::arg("padding_l"),
          py::arg("padding_r"), py::arg("kind"), py::arg("scale") = 1.f, py::arg("channels_last") = false);
    m.def("pool2d_backward", &backward, "Gradient of pool2d_forward (scale 1); max pooling needs the forward input.",
          py::arg("grad_output"), py::arg("input").none(true), py::arg("input_size"), py::arg("kernel"),
          py::arg("stride"), py::arg("dilation"), py::arg("padding_l"), py::arg("padding_r"), py::arg("kind"));
    m.def("pool2d_forward_impl",
          [](const V &x, const V &k, const V &s, const V &d, const V &pl, const V &pr, const std::string &kind, float scale,
             const std::string &type, bool channels_last) {
              return guarded("pool2d", [&] {
                  Pool p = parse(as_dims(x), k, s, d, pl, pr, kind, scale);
                  p.type = parse_type(type);
                  p.channels_last = channels_last;
                  return info(forward_plan(p));
              });
          },
          "impl_info_str() of the primitive pool2d_forward runs (input_size NCHW, in NHWC memory if channels_last).",
          py::arg("input_size"), py::arg("kernel"), py::arg("stride"), py::arg("dilation"), py::arg("padding_l"),
          py::arg("padding_r"), py::arg("kind"), py::arg("scale") = 1.f, py::arg("dtype") = "float32",
          py::arg("channels_last") = false);
    m.def("pool2d_backward_impl",
          [](const V &x, const V &k, const V &s, const V &d, const V &pl, const V &pr, const std::string &kind) {
              return guarded("pool2d_grad", [&] { return info(backward_plan(parse(as_dims(x), k, s, d, pl, pr, kind, 1.f))); });
          },
          "impl_info_str() of the primitive pool2d_backward runs.", py::arg("input_size"), py::arg("kernel"),
          py::arg("stride"), py::arg("dilation"), py::arg("padding_l"), py::arg("padding_r"), py::arg("kind"));
}

}  // namespace algoswap_dnnl
