// Batch normalisation (NCHW, per channel; inference also on NHWC memory, and with a relu fused) and layer normalisation
// (2-D (rows, features), per row), forward and backward. Backward passes recompute the batch / row statistics with a cached
// forward_training primitive first (the ops receive the forward input, not its statistics).
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using pk = dnnl::prop_kind;
using flags = dnnl::normalization_flags;

struct Norm {
    bool layer;  // layer_normalization of (rows, features), else batch_normalization of NCHW
    dims x;      // the logical shape (NCHW for batch normalisation)
    float eps;
    bool channels_last = false;  // batch normalisation of NHWC memory (oneDNN's nspc kernels; ncsp's are slower)
    // Inference batch normalisation with oneDNN's fused relu (fuse_norm_relu): a max with 0 in its jit kernels,
    // which turns NaN into 0. oneDNN 3.2's batch normalization takes no eltwise post-ops (every one is refused).
    bool fuse_relu = false;

    const char *name() const { return layer ? "layer_norm" : "batch_norm"; }
    int64_t channels() const { return x[1]; }             // scale / shift length
    int64_t stats() const { return layer ? x[0] : x[1]; }  // mean / variance length
    memory::desc data() const { return plain(x, layer ? tag::ab : channels_last ? tag::nhwc : tag::nchw); }
    std::string key(const char *op, flags f) const {
        return make_key(op, {x}, float_text(eps) + "/" + std::to_string(static_cast<unsigned>(f)) + (channels_last ? "/nhwc" : "") +
                                     (fuse_relu ? "/relu" : ""));
    }
    flags extra_flags() const { return fuse_relu ? flags::fuse_norm_relu : flags::none; }
};

memory::desc vec(int64_t n) { return plain({n}, tag::a); }

Norm parse(bool layer, const dims &x, float eps, bool channels_last = false, bool fuse_relu = false) {
    std::string where = std::string("algoswap_dnnl ") + (layer ? "layer_norm" : "batch_norm") + ": ";
    if (layer && x.size() != 2) throw py::value_error(where + "input must be 2-D (rows, features)");
    if (!layer && x.size() != 4) throw py::value_error(where + "input must be 4-D (NCHW)");
    if (numel(x) == 0) throw py::value_error(where + "empty arrays are not passed to oneDNN");
    if (!(eps >= 0)) throw py::value_error(where + "eps must be >= 0");
    if (channels_last && layer) throw py::value_error(where + "channels_last is for batch normalisation only");
    if (fuse_relu && layer) throw py::value_error(where + "fuse_relu is for batch normalisation only");
    return Norm{layer, channels_last ? dims{x[0], x[3], x[1], x[2]} : x, eps, channels_last, fuse_relu};
}

bool has(flags f, flags bit) { return (static_cast<unsigned>(f) & static_cast<unsigned>(bit)) != 0; }

// Forward slots: 0 src, 1 dst, 2 mean, 3 variance, 4 scale, 5 shift. Mean and variance are inputs
// with use_global_stats, outputs of forward_training, absent otherwise.
template <class Fwd>
Plan make_forward(const Norm &n, pk prop, flags f) {
    Plan p{Fwd(typename Fwd::primitive_desc(cpu_engine(), prop, n.data(), n.data(), n.eps, f | n.extra_flags(), user_scratchpad()))};
    p.bind(DNNL_ARG_SRC, 0, false, n.data());
    p.bind(DNNL_ARG_DST, 1, true, n.data());
    bool global = has(f, flags::use_global_stats);
    if (global || prop == pk::forward_training) {
        p.bind(DNNL_ARG_MEAN, 2, !global, vec(n.stats()));
        p.bind(DNNL_ARG_VARIANCE, 3, !global, vec(n.stats()));
    }
    if (has(f, flags::use_scale)) p.bind(DNNL_ARG_SCALE, 4, false, vec(n.channels()));
    if (has(f, flags::use_shift)) p.bind(DNNL_ARG_SHIFT, 5, false, vec(n.channels()));
    return p;
}

// Backward slots: 0 diff_dst, 1 src, 2 mean, 3 variance, 4 scale, 5 diff_src, 6 diff_scale.
// prop backward (diff_scale too, use_scale set) or backward_data (diff_src only).
template <class Fwd, class Bwd>
Plan make_backward(const Norm &n, pk prop, flags f) {
    typename Fwd::primitive_desc hint(cpu_engine(), pk::forward_training, n.data(), n.data(), n.eps, f);
    Plan p{Bwd(typename Bwd::primitive_desc(cpu_engine(), prop, n.data(), n.data(), n.data(), n.eps, f, hint, user_scratchpad()))};
    p.bind(DNNL_ARG_DIFF_DST, 0, false, n.data());
    p.bind(DNNL_ARG_SRC, 1, false, n.data());
    p.bind(DNNL_ARG_MEAN, 2, false, vec(n.stats()));
    p.bind(DNNL_ARG_VARIANCE, 3, false, vec(n.stats()));
    if (has(f, flags::use_scale)) p.bind(DNNL_ARG_SCALE, 4, false, vec(n.channels()));
    p.bind(DNNL_ARG_DIFF_SRC, 5, true, n.data());
    // oneDNN 3.2's batch normalization wants diff_scale even for backward_data with use_scale.
    if (prop == pk::backward || p.arg_md(DNNL_ARG_DIFF_SCALE).get_size() > 0)
        p.bind(DNNL_ARG_DIFF_SCALE, 6, true, vec(n.channels()));
    return p;
}

PlanPtr forward_plan(const Norm &n, pk prop, flags f) {
    const char *op = prop == pk::forward_training ? "norm_stats" : "norm";
    return cached_plan(n.key(n.layer ? (std::string("layer_") + op).c_str() : (std::string("batch_") + op).c_str(), f), [&] {
        return n.layer ? make_forward<dnnl::layer_normalization_forward>(n, prop, f)
                       : make_forward<dnnl::batch_normalization_forward>(n, prop, f);
    });
}

PlanPtr backward_plan(const Norm &n, pk prop, flags f) {
    std::string op = std::string(n.layer ? "layer" : "batch") + (prop == pk::backward ? "_norm_grad" : "_norm_grad_data");
    return cached_plan(n.key(op.c_str(), f), [&] {
        return n.layer ? make_backward<dnnl::layer_normalization_forward, dnnl::layer_normalization_backward>(n, prop, f)
                       : make_backward<dnnl::batch_normalization_forward, dnnl::batch_normalization_backward>(n, prop, f);
    });
}

// A per-channel vector argument (None allowed): its pointer, checked to have n.channels() entries.
float *channel_arg(const Norm &n, py::handle obj, const char *name) {
    if (obj.is_none()) return nullptr;
    F32 v = check_f32(obj, n.name(), name);
    if (v.shape != dims{n.channels()})
        throw py::value_error(std::string("algoswap_dnnl ") + n.name() + ": argument '" + name + "' must have shape (" +
                              std::to_string(n.channels()) + ",)");
    return v.data;
}

flags forward_flags(bool global, bool scale, bool shift) {
    flags f = flags::none;
    if (global) f = f | flags::use_global_stats;
    if (scale) f = f | flags::use_scale;
    if (shift) f = f | flags::use_shift;
    return f;
}

// want: "input" (diff_src: prop backward_data) or "weight" (diff_scale: prop backward with use_scale).
// oneDNN 3.2's layer normalization refuses backward_data with use_scale (its jit kernel): the input's
// gradient with a weight runs prop backward there, its diff_scale left unused.
pk backward_prop(const Norm &n, const std::string &want, bool scale, const char *op) {
    if (want == "input") return n.layer && scale ? pk::backward : pk::backward_data;
    if (want == "weight") return pk::backward;
    throw py::value_error(std::string("algoswap_dnnl ") + op + ": want must be 'input' or 'weight', got '" + want + "'");
}

flags backward_flags(pk prop, bool scale) { return (scale || prop == pk::backward) ? flags::use_scale : flags::none; }

// channels_last: x is NHWC memory, given as its (N, H, W, C) array; the output is too.
py::array_t<float> forward(bool layer, py::handle x, py::handle mean, py::handle var, py::handle w, py::handle b, float eps,
                           bool channels_last = false, bool fuse_relu = false) {
    const char *op = layer ? "layer_norm" : "batch_norm";
    return guarded(op, [&] {
        F32 X = check_f32(x, op, "input");
        Norm n = parse(layer, X.shape, eps, channels_last, fuse_relu);
        if (mean.is_none() != var.is_none())
            throw py::value_error(std::string("algoswap_dnnl ") + op + ": give both mean and var, or neither");
        float *m = channel_arg(n, mean, "mean"), *v = channel_arg(n, var, "var");
        float *scale = channel_arg(n, w, "weight"), *shift = channel_arg(n, b, "bias");
        flags f = forward_flags(m != nullptr, scale != nullptr, shift != nullptr);
        auto out = empty_f32(X.shape);
        forward_plan(n, pk::forward_inference, f)->run({X.data, out.mutable_data(), m, v, scale, shift});
        return out;
    });
}

py::array_t<float> backward(bool layer, py::handle dy, py::handle x, py::handle w, float eps, const std::string &want) {
    std::string name = std::string(layer ? "layer_norm" : "batch_norm") + "_grad_" + want;
    const char *op = name.c_str();
    return guarded(op, [&] {
        F32 DY = check_f32(dy, op, "grad_output"), X = check_f32(x, op, "input");
        Norm n = parse(layer, X.shape, eps);
        if (DY.shape != X.shape) throw py::value_error(std::string("algoswap_dnnl ") + op + ": grad_output and input shapes differ");
        float *scale = channel_arg(n, w, "weight");
        pk prop = backward_prop(n, want, scale != nullptr, op);
        std::vector<float> ones;
        if (prop == pk::backward && scale == nullptr) {
            ones.assign(static_cast<size_t>(n.channels()), 1.f);  // diff_scale does not depend on scale
            scale = ones.data();
        }
        flags f = backward_flags(prop, scale != nullptr);
        PlanPtr stats = forward_plan(n, pk::forward_training, flags::none), back = backward_plan(n, prop, f);
        std::vector<float> y(static_cast<size_t>(numel(n.x))), mean(static_cast<size_t>(n.stats())), var(mean.size());
        stats->run({X.data, y.data(), mean.data(), var.data(), nullptr, nullptr});
        if (want == "input") {
            auto out = empty_f32(n.x);
            std::vector<float> diff_scale(static_cast<size_t>(n.channels()));  // unused
            back->run({DY.data, X.data, mean.data(), var.data(), scale, out.mutable_data(), diff_scale.data()});
            return out;
        }
        auto out = empty_f32({n.channels()});
        back->run({DY.data, X.data, mean.data(), var.data(), scale, y.data(), out.mutable_data()});  // diff_src into y
        return out;
    });
}

// x: the logical shape (NCHW), whatever the memory order.
PlanInfo forward_info(bool layer, const std::vector<int64_t> &x, bool global, bool scale, bool shift, float eps,
                      bool channels_last = false, bool fuse_relu = false) {
    return guarded(layer ? "layer_norm" : "batch_norm", [&] {
        dims shape = as_dims(x);
        if (channels_last && shape.size() == 4) shape = {shape[0], shape[2], shape[3], shape[1]};
        return info(forward_plan(parse(layer, shape, eps, channels_last, fuse_relu), pk::forward_inference,
                                 forward_flags(global, scale, shift)));
    });
}

PlanInfo backward_info(bool layer, const std::vector<int64_t> &x, bool scale, float eps, const std::string &want) {
    std::string op = std::string(layer ? "layer_norm" : "batch_norm") + "_grad_" + want;
    return guarded(op.c_str(), [&] {
        Norm n = parse(layer, as_dims(x), eps);
        pk prop = backward_prop(n, want, scale, op.c_str());
        forward_plan(n, pk::forward_training, flags::none);
        return info(backward_plan(n, prop, backward_flags(prop, scale)));
    });
}

}  // namespace

void init_norm(py::module_ &m) {
    m.def("batch_norm",
          [](py::handle x, py::handle mean, py::handle var, py::handle w, py::handle b, float eps, bool channels_last,
             bool fuse_relu) {
              return forward(false, x, mean, var, w, b, eps, channels_last, fuse_relu);
          },
          "(input - mean) / sqrt(var + eps) * weight + bias per channel of an NCHW array (channels_last: of an NHWC "
          "array, (N, H, W, C), and the output too); without mean and var, the batch's own (biased) statistics over N, H, W. "
          "fuse_relu: then max(y, 0) in the same primitive (oneDNN's fuse_norm_relu, which turns NaN into 0).",
          py::arg("input"), py::arg("mean").none(true) = py::none(), py::arg("var").none(true) = py::none(),
          py::arg("weight").none(true) = py::none(), py::arg("bias").none(true) = py::none(), py::arg("eps") = 1e-5f,
          py::arg("channels_last") = false, py::arg("fuse_relu") = false);
    m.def("batch_norm_backward",
          [](py::handle dy, py::handle x, py::handle w, float eps, const std::string &want) {
              return backward(false, dy, x, w, eps, want);
          },
          "Gradient of batch_norm with batch statistics (recomputed from input) with respect to the input "
          "(want='input', through the statistics) or the weight (want='weight').",
          py::arg("grad_output"), py::arg("input"), py::arg("weight").none(true) = py::none(), py::arg("eps") = 1e-5f,
          py::arg("want") = "input");
    m.def("layer_norm",
          [](py::handle x, py::handle w, py::handle b, float eps) { return forward(true, x, py::none(), py::none(), w, b, eps); },
          "(input - mean) / sqrt(var + eps) * weight + bias along each row of a 2-D (rows, features) array.",
          py::arg("input"), py::arg("weight").none(true) = py::none(), py::arg("bias").none(true) = py::none(), py::arg("eps") = 1e-5f);
    m.def("layer_norm_backward",
          [](py::handle dy, py::handle x, py::handle w, float eps, const std::string &want) {
              return backward(true, dy, x, w, eps, want);
          },
          "Gradient of layer_norm (row statistics recomputed from input) with respect to the input (want='input') "
          "or the weight (want='weight').",
          py::arg("grad_output"), py::arg("input"), py::arg("weight").none(true) = py::none(), py::arg("eps") = 1e-5f,
          py::arg("want") = "input");
    m.def("batch_norm_impl",
          [](const std::vector<int64_t> &x, bool global, bool scale, bool shift, float eps, bool channels_last,
             bool fuse_relu) {
              return forward_info(false, x, global, scale, shift, eps, channels_last, fuse_relu);
          },
          "impl_info_str() of the primitive batch_norm runs (input_size NCHW; channels_last: on NHWC memory).",
          py::arg("input_size"), py::arg("global_stats"), py::arg("scale"), py::arg("shift"), py::arg("eps") = 1e-5f,
          py::arg("channels_last") = false, py::arg("fuse_relu") = false);
    m.def("batch_norm_backward_impl",
          [](const std::vector<int64_t> &x, bool scale, float eps, const std::string &want) {
              return backward_info(false, x, scale, eps, want);
          },
          "impl_info_str() of the backward primitive batch_norm_backward runs.", py::arg("input_size"), py::arg("scale"),
          py::arg("eps") = 1e-5f, py::arg("want") = "input");
    m.def("layer_norm_impl",
          [](const std::vector<int64_t> &x, bool scale, bool shift, float eps) {
              return forward_info(true, x, false, scale, shift, eps);
          },
          "impl_info_str() of the primitive layer_norm runs.", py::arg("input_size"), py::arg("scale"), py::arg("shift"),
          py::arg("eps") = 1e-5f);
    m.def("layer_norm_backward_impl",
          [](const std::vector<int64_t> &x, bool scale, float eps, const std::string &want) {
              return backward_info(true, x, scale, eps, want);
          },
          "impl_info_str() of the backward primitive layer_norm_backward runs.", py::arg("input_size"), py::arg("scale"),
          py::arg("eps") = 1e-5f, py::arg("want") = "input");
}

}  // namespace algoswap_dnnl
