// Elementwise primitives (relu / leaky relu, logistic, tanh, linear, sqrt, pow, clip_v2, swish, gelu_erf,
// gelu_tanh, hardswish, hardsigmoid, elu, mish), forward and backward, on arrays of any shape (seen as one
// flat array). alpha and beta are oneDNN's: linear is alpha * x + beta, pow is alpha * x ** beta, clip_v2
// clamps to [alpha, beta], swish is x * sigmoid(alpha * x), hardswish and hardsigmoid read
// alpha * x + beta (1/6 and 1/2 for PyTorch's), elu's alpha is PyTorch's.
#include <cmath>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using pk = dnnl::prop_kind;
using alg = dnnl::algorithm;

memory::desc flat(int64_t size, dt type = dt::f32) { return plain({size}, tag::a, type); }

// One activation: its forward algorithm, and the backward one with what it reads (the forward
// input, or for the *_use_dst_for_bwd kinds the forward output).
struct Kind {
    std::string name;
    alg forward, backward;
    bool backward_uses_dst;
};

Kind parse(const std::string &kind) {
    if (kind == "relu") return {kind, alg::eltwise_relu, alg::eltwise_relu, false};
    if (kind == "logistic") return {kind, alg::eltwise_logistic, alg::eltwise_logistic_use_dst_for_bwd, true};
    if (kind == "tanh") return {kind, alg::eltwise_tanh, alg::eltwise_tanh_use_dst_for_bwd, true};
    if (kind == "linear") return {kind, alg::eltwise_linear, alg::eltwise_linear, false};
    if (kind == "sqrt") return {kind, alg::eltwise_sqrt, alg::eltwise_sqrt_use_dst_for_bwd, true};
    if (kind == "pow") return {kind, alg::eltwise_pow, alg::eltwise_pow, false};
    if (kind == "clip_v2") return {kind, alg::eltwise_clip_v2, alg::eltwise_clip_v2, false};
    if (kind == "swish") return {kind, alg::eltwise_swish, alg::eltwise_swish, false};
    if (kind == "gelu_erf") return {kind, alg::eltwise_gelu_erf, alg::eltwise_gelu_erf, false};
    if (kind == "gelu_tanh") return {kind, alg::eltwise_gelu_tanh, alg::eltwise_gelu_tanh, false};
    if (kind == "hardswish") return {kind, alg::eltwise_hardswish, alg::eltwise_hardswish, false};
    if (kind == "hardsigmoid") return {kind, alg::eltwise_hardsigmoid, alg::eltwise_hardsigmoid, false};
    if (kind == "elu") return {kind, alg::eltwise_elu, alg::eltwise_elu, false};
    if (kind == "mish") return {kind, alg::eltwise_mish, alg::eltwise_mish, false};
    throw py::value_error("algoswap_dnnl eltwise: kind must be 'relu', 'logistic', 'tanh', 'linear', 'sqrt', 'pow', "
                          "'clip_v2', 'swish', 'gelu_erf', 'gelu_tanh', 'hardswish', 'hardsigmoid', 'elu' or 'mish', got '" +
                          kind + "'");
}

std::string constants(float alpha, float beta) { return float_text(alpha) + "/" + float_text(beta); }

PlanPtr forward_plan(const Kind &k, int64_t size, float alpha, float beta = 0.f, dt type = dt::f32) {
    return cached_plan(make_key(k.name.c_str(), {{size}}, constants(alpha, beta) + type_name(type)), [&] {
        memory::desc md = flat(size, type);
        dnnl::eltwise_forward::primitive_desc pd(cpu_engine(), pk::forward_inference, k.forward, md, md, alpha, beta,
                                                 user_scratchpad());
        Plan p{dnnl::eltwise_forward(pd)};
        p.bind(DNNL_ARG_SRC, 0, false, md);
        p.bind(DNNL_ARG_DST, 1, true, md);
        return p;
    });
}

PlanPtr backward_plan(const Kind &k, int64_t size, float alpha, float beta = 0.f) {
    return cached_plan(make_key((k.name + "_grad").c_str(), {{size}}, constants(alpha, beta)), [&] {
        dnnl::eltwise_forward::primitive_desc hint(cpu_engine(), pk::forward_training, k.backward, flat(size), flat(size),
                                                   alpha, beta);
        dnnl::eltwise_backward::primitive_desc pd(cpu_engine(), k.backward, flat(size), flat(size), flat(size), alpha, beta,
                                                  hint, user_scratchpad());
        Plan p{dnnl::eltwise_backward(pd)};
        p.bind(DNNL_ARG_DIFF_DST, 0, false, flat(size));
        p.bind(k.backward_uses_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, 1, false, flat(size));
        p.bind(DNNL_ARG_DIFF_SRC, 2, true, flat(size));
        return p;
    });
}

// oneDNN's relu with alpha 0 is a max that turns NaN into 0 (PyTorch keeps it), and clip_v2 and hardsigmoid
// clamps that turn it into a bound; any other alpha keeps NaN (x * alpha), as the other kinds do.
bool drops_nan(const Kind &k, float alpha) {
    return (k.forward == alg::eltwise_relu && alpha == 0.f) || k.forward == alg::eltwise_clip_v2 ||
           k.forward == alg::eltwise_hardsigmoid;
}

// oneDNN's gelu_erf is NaN at +inf and overflows from 1.7e38 on; PyTorch's is x there. From x = 8 on, x * Phi(x)
// rounds to x in float32 and bfloat16 (1 - Phi(8) is 6e-16), so those elements are x itself.
constexpr float GELU_IS_X_FROM = 8.f;

py::array forward(py::handle x, const std::string &kind, float alpha, float beta) {
    return guarded(kind.c_str(), [&] {
        Kind k = parse(kind);
        Tensor X = check_float(x, kind.c_str(), "input");
        py::array out = empty_like_type(X, X.shape);
        int64_t size = numel(X.shape);
        if (size == 0) return out;
        forward_plan(k, size, alpha, beta, X.type)->run({X.data, out.mutable_data()});
        if (drops_nan(k, alpha) && any_nan(X.data, X.type, size)) restore_nan(X.data, out.mutable_data(), X.type, size);
        if (k.forward == alg::eltwise_gelu_erf) restore_at_least(X.data, out.mutable_data(), X.type, size, GELU_IS_X_FROM);
        return out;
    });
}

// x ** e as PyTorch computes it: e = 0.5 and -0.5 as sqrt and 1 / sqrt (NaN at -inf, where pow gives
// +inf and 0).
float torch_pow(float x, float e) {
    if (e == 0.5f) return std::sqrt(x);
    if (e == -0.5f) return 1.f / std::sqrt(x);
    return std::pow(x, e);
}

// The slope of gelu at x in double, as PyTorch's float64 kernels have it (exact erf form, or the tanh form
// with 1 + tanh(u) = 2 sigmoid(2u)): NaN at +-inf (x times a zero density).
double gelu_slope(alg form, double x) {
    if (form == alg::eltwise_gelu_erf) return 0.5 * std::erfc(-x * M_SQRT1_2) + x * std::exp(-0.5 * x * x) * 0.5 * M_2_SQRTPI * M_SQRT1_2;
    double c = std::sqrt(2.0 / M_PI), u2 = 2.0 * c * (x + 0.044715 * x * x * x), e = std::exp(-std::fabs(u2));
    double s = (u2 >= 0 ? 1.0 : e) / (1.0 + e);
    return s + 2.0 * x * s * (1.0 - s) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

// Where oneDNN's backward differs from PyTorch's on values that are not finite (checked first):
// relu and clip_v2 multiply grad_output by 0 outside where they pass it (PyTorch selects 0: an infinite or
// NaN gradient there is 0), leaky relu passes grad_output unscaled at a NaN input (PyTorch scales it: NaN > 0
// is false), elu passes it unscaled at a NaN input too (PyTorch: NaN), gelu's slope flushes to 0 below
// x = -6.15 (erf) and -5.16 (tanh) where it is still a normal float (PyTorch: an infinite grad_output stays
// infinite there), and pow's gradient at an infinite input comes out NaN (PyTorch's grad * (alpha * beta *
// x ** (beta - 1)) is infinite). These elements are recomputed as PyTorch does.
void exact_backward(const Kind &k, const F32 &dy, const F32 &data, float alpha, float beta, float *out) {
    int64_t size = numel(data.shape);
    if (k.forward == alg::eltwise_relu && alpha == 0.f && !all_finite(dy.data, dt::f32, size)) {
        for (int64_t i = 0; i < size; ++i) out[i] = data.data[i] <= 0.f ? 0.f : dy.data[i];
    } else if (k.forward == alg::eltwise_clip_v2 && !all_finite(dy.data, dt::f32, size)) {
        for (int64_t i = 0; i < size; ++i) out[i] = alpha < data.data[i] && data.data[i] < beta ? dy.data[i] : 0.f;
    } else if (k.forward == alg::eltwise_elu && any_nan(data.data, dt::f32, size)) {
        restore_nan(data.data, out, dt::f32, size);
    } else if ((k.forward == alg::eltwise_gelu_erf || k.forward == alg::eltwise_gelu_tanh) && !all_finite(dy.data, dt::f32, size)) {
        for (int64_t i = 0; i < size; ++i)
            if (!std::isfinite(dy.data[i])) out[i] = static_cast<float>(dy.data[i] * gelu_slope(k.forward, data.data[i]));
    } else if (k.forward == alg::eltwise_relu && alpha != 0.f && any_nan(data.data, dt::f32, size)) {
        for (int64_t i = 0; i < size; ++i)
            if (std::isnan(data.data[i])) out[i] = dy.data[i] * alpha;
    } else if (k.forward == alg::eltwise_pow && !all_finite(data.data, dt::f32, size)) {
        for (int64_t i = 0; i < size; ++i)
            if (std::isinf(data.data[i])) out[i] = dy.data[i] * (alpha * beta * torch_pow(data.data[i], beta - 1.f));
    }
}

// data: the forward input (relu) or output (logistic, tanh).
py::array_t<float> backward(py::handle dy, py::handle data, const std::string &kind, float alpha, float beta) {
    std::string op = kind + "_grad";
    return guarded(op.c_str(), [&] {
        Kind k = parse(kind);
        const char *second = k.backward_uses_dst ? "output" : "input";
        F32 DY = check_f32(dy, op.c_str(), "grad_output"), D = check_f32(data, op.c_str(), second);
        if (DY.shape != D.shape)
            throw py::value_error("algoswap_dnnl " + op + ": grad_output and " + second + " shapes differ");
        auto out = empty_f32(D.shape);
        if (numel(D.shape) == 0) return out;
        backward_plan(k, numel(D.shape), alpha, beta)->run({DY.data, D.data, out.mutable_data()});
        exact_backward(k, DY, D, alpha, beta, out.mutable_data());
        return out;
    });
}

}  // namespace

// oneDNN's eltwise_relu with alpha 0 is a max in its jit kernels (NaN becomes 0) and 0 * x in its gemm
// and reference ones (-inf becomes NaN). elu with alpha 0 is x for x > 0, else 0 * (exp(x) - 1): NaN
// stays NaN and -inf gives 0 in every kernel; the linear step (x * 1 + 0) makes its -0 for x < 0 a +0.
void append_exact_relu(dnnl::post_ops &ops) {
    ops.append_eltwise(alg::eltwise_elu, 0.f, 0.f);
    ops.append_eltwise(alg::eltwise_linear, 1.f, 0.f);
}

void init_eltwise(py::module_ &m) {
    m.def("relu", [](py::handle x) { return forward(x, "relu", 0.f, 0.f); }, "max(input, 0) elementwise.", py::arg("input"));
    m.def("relu_grad", [](py::handle dy, py::handle x) { return backward(dy, x, "relu", 0.f, 0.f); },
          "grad_output where input > 0, else 0.", py::arg("grad_output"), py::arg("input"));
    m.def("relu_impl", [](int64_t size) { return guarded("relu", [&] { return info(forward_plan(parse("relu"), size, 0.f)); }); },
          "impl_info_str() of the primitive relu runs on this many elements.", py::arg("size"));
    m.def("relu_grad_impl",
          [](int64_t size) { return guarded("relu_grad", [&] { return info(backward_plan(parse("relu"), size, 0.f)); }); },
          "impl_info_str() of the primitive relu_grad runs on this many elements.", py::arg("size"));
    m.def("eltwise", &forward,
          "kind 'relu' (alpha: the slope below 0, leaky relu), 'logistic' (sigmoid), 'tanh', 'linear' "
          "(alpha * x + beta), 'sqrt', 'pow' (alpha * x ** beta), 'clip_v2' (to [alpha, beta]), 'swish' "
          "(x * sigmoid(alpha * x)), 'gelu_erf', 'gelu_tanh', 'hardswish' and 'hardsigmoid' (of alpha * x + beta), "
          "'elu' (alpha) or 'mish', elementwise, NaN and infinities as in PyTorch.",
          py::arg("input"), py::arg("kind"), py::arg("alpha") = 0.f, py::arg("beta") = 0.f);
    m.def("eltwise_grad", &backward,
          "Gradient of eltwise: from the forward output for 'logistic', 'tanh' and 'sqrt', else from the forward input.",
          py::arg("grad_output"), py::arg("data"), py::arg("kind"), py::arg("alpha") = 0.f, py::arg("beta") = 0.f);
    m.def("eltwise_impl",
          [](int64_t size, const std::string &kind, float alpha, const std::string &type, float beta) {
              return guarded(kind.c_str(),
                             [&] { return info(forward_plan(parse(kind), size, alpha, beta, parse_type(type))); });
          },
          "impl_info_str() of the primitive eltwise runs on this many elements.", py::arg("size"), py::arg("kind"),
          py::arg("alpha") = 0.f, py::arg("dtype") = "float32", py::arg("beta") = 0.f);
    m.def("eltwise_grad_impl",
          [](int64_t size, const std::string &kind, float alpha, float beta) {
              return guarded((kind + "_grad").c_str(), [&] { return info(backward_plan(parse(kind), size, alpha, beta)); });
          },
          "impl_info_str() of the primitive eltwise_grad runs on this many elements.", py::arg("size"), py::arg("kind"),
          py::arg("alpha") = 0.f, py::arg("beta") = 0.f);
}

}  // namespace algoswap_dnnl
