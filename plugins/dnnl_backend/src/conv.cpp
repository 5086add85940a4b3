// conv2d forward, backward data and backward weights.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <limits>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using V = std::vector<int64_t>;
using pk = dnnl::prop_kind;
using conv_fwd = dnnl::convolution_forward;

// The activations fused as post-ops. "relu" keeps NaN as PyTorch does (append_exact_relu); the *_finite
// ones are oneDNN's own, exact only where every sum is finite: relu_finite (a clip to [0, FLT_MAX]) and
// relu6_finite (clip_v2 to [0, 6]) turn NaN into a bound, gelu_finite (gelu_erf) is NaN at +inf and
// overflows from 1.7e38 on. silu (swish) and hardswish give NaN and infinities where PyTorch does.
const std::string ACTIVATIONS[] = {"none", "relu", "relu_finite", "relu6_finite", "silu", "hardswish", "gelu_finite"};

struct Conv {
    dims x, w, y;                              // NCHW input, OIHW weight, NCHW output (logical shapes)
    dims stride, pad_l, pad_r, dilation;       // dilation in oneDNN's convention (torch's - 1)
    int64_t groups;
    bool bias;
    dnnl::algorithm algo;
    std::string algo_name, layout;
    bool channels_last = false;    // the caller's input, output and residual are in NHWC memory order
    bool residual = false;         // a residual of the output's shape is added (binary_add post-op)
    std::string activation = "none";  // applied last: one of ACTIVATIONS
    dt type = dt::f32;             // of input, weight, bias, residual and output (forward; f32 accumulation)

    std::string key(const char *op) const {
        std::string fused = (channels_last ? "/nhwc" : "/nchw") + std::string(residual ? "/residual/" : "/") + activation +
                            "/" + type_name(type);
        return make_key(op, {x, w, stride, pad_l, pad_r, dilation, {groups, bias ? 1 : 0}}, algo_name + "/" + layout + fused);
    }
    // The caller's layout of an activation (input, output, residual).
    memory::desc user_act(const dims &shape) const { return plain(shape, channels_last ? tag::nhwc : tag::nchw, type); }
    // The layout the primitive works in: the caller's (plain), channels-last, or oneDNN's choice.
    memory::desc act(const dims &shape) const {
        if (layout == "plain") return user_act(shape);
        return plain(shape, layout == "nhwc" ? tag::nhwc : tag::any, type);
    }
    dims wdims() const {
        if (groups == 1) return w;
        return {groups, w[0] / groups, w[1], w[2], w[3]};
    }
    memory::desc user_w() const { return plain(wdims(), groups == 1 ? tag::oihw : tag::goihw, type); }
    memory::desc wts() const { return layout == "plain" ? user_w() : plain(wdims(), tag::any, type); }
    memory::desc bias_md() const { return bias ? plain({w[0]}, tag::a, type) : memory::desc(); }
    // The activation as eltwise post-ops (appended to ops).
    dnnl::post_ops activation_ops(dnnl::post_ops ops = dnnl::post_ops()) const {
        if (activation == "relu") append_exact_relu(ops);
        if (activation == "relu_finite")  // relu as a clip to [0, FLT_MAX]: +0 for negatives (its relu gives -0)
            ops.append_eltwise(dnnl::algorithm::eltwise_clip, 0.f, std::numeric_limits<float>::max());
        if (activation == "relu6_finite") ops.append_eltwise(dnnl::algorithm::eltwise_clip_v2, 0.f, 6.f);
        if (activation == "silu") ops.append_eltwise(dnnl::algorithm::eltwise_swish, 1.f, 0.f);
        if (activation == "hardswish") ops.append_eltwise(dnnl::algorithm::eltwise_hardswish, 1.f / 6.f, 0.5f);
        if (activation == "gelu_finite") ops.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
        return ops;
    }
    // Residual addition, then the activation (unless with_activation is false), fused as post-ops.
    dnnl::primitive_attr fused_attr(bool with_activation = true) const {
        dnnl::primitive_attr attr = user_scratchpad();
        dnnl::post_ops ops;
        if (residual) ops.append_binary(dnnl::algorithm::binary_add, user_act(y));
        attr.set_post_ops(with_activation ? activation_ops(ops) : ops);
        return attr;
    }

    conv_fwd::primitive_desc forward(pk prop, const dnnl::primitive_attr &attr = dnnl::primitive_attr()) const {
        return conv_fwd::primitive_desc(cpu_engine(), prop, algo, act(x), wts(), bias_md(), act(y), stride, dilation,
                                        pad_l, pad_r, attr);
    }
};

constexpr int RESIDUAL_ARG = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;

// An activation's logical NCHW shape from the shape of the array holding it.
dims logical(const dims &shape, bool channels_last) {
    if (!channels_last || shape.size() != 4) return shape;
    return {shape[0], shape[3], shape[1], shape[2]};
}

// A new output array in the caller's memory order (NHWC arrays are returned as such; Python views them as NCHW).
py::array_t<float> empty_act(const dims &shape, bool channels_last) {
    return empty_f32(channels_last ? dims{shape[0], shape[2], shape[3], shape[1]} : shape);
}

dnnl::algorithm conv_algorithm(const std::string &name) {
    if (name == "direct") return dnnl::algorithm::convolution_direct;
    if (name == "auto") return dnnl::algorithm::convolution_auto;
    if (name == "winograd") return dnnl::algorithm::convolution_winograd;
    throw py::value_error("algoswap_dnnl conv2d: algorithm must be 'direct', 'auto' or 'winograd', got '" + name + "'");
}

Conv parse(const char *op, const dims &x, const dims &w, bool bias, const V &stride, const V &pad_l, const V &pad_r,
           const V &dilation, int64_t groups, const std::string &algorithm, const std::string &layout,
           bool channels_last = false, bool residual = false, const std::string &activation = "none",
           dt type = dt::f32) {
    std::string where = std::string("algoswap_dnnl ") + op + ": ";
    if (std::find(std::begin(ACTIVATIONS), std::end(ACTIVATIONS), activation) == std::end(ACTIVATIONS))
        throw py::value_error(where + "activation must be 'none', 'relu', 'relu_finite', 'relu6_finite', 'silu', 'hardswish' "
                              "or 'gelu_finite' (the *_finite ones drop NaN or overflow: for sums known to be finite), got '" +
                              activation + "'");
    if (x.size() != 4 || w.size() != 4) throw py::value_error(where + "input and weight must be 4-D (NCHW, OIHW)");
    if (stride.size() != 2 || pad_l.size() != 2 || pad_r.size() != 2 || dilation.size() != 2)
        throw py::value_error(where + "stride, padding_l, padding_r and dilation must have 2 entries each");
    if (groups < 1 || x[1] != w[1] * groups || w[0] % groups)
        throw py::value_error(where + "input channels must equal weight.shape[1] * groups, and groups divide the output channels");
    if (layout != "plain" && layout != "any" && layout != "nhwc" && layout != "auto")
        throw py::value_error(where + "layout must be 'auto', 'plain', 'any' or 'nhwc', got '" + layout + "'");
    Conv c{x, w, {x[0], w[0], 0, 0}, as_dims(stride), as_dims(pad_l), as_dims(pad_r), {dilation[0] - 1, dilation[1] - 1},
           groups, bias, conv_algorithm(algorithm), algorithm, layout, channels_last, residual, activation, type};
    for (int i = 0; i < 2; ++i) {
        int64_t span = x[2 + i] + pad_l[i] + pad_r[i] - (dilation[i] * (w[2 + i] - 1) + 1);
        if (span < 0 || stride[i] < 1) throw py::value_error(where + "the dilated kernel does not fit in the padded input");
        c.y[2 + i] = span / stride[i] + 1;
    }
    return c;
}

// oneDNN 3.2 keeps the JIT kernels of its brgemm convolutions (impl "brgconv...") in one set for the life of the
// process, where a new primitive reuses a kernel of identical machine code. A kernel with an eltwise post-op embeds
// the address of its own constants, so it never matches: every such primitive made adds its kernels for good (30 to
// 70 KB each, measured; the same shape made again adds them again). So at most dnnl_brgemm_eltwise of them are
// made in a process; past that, a convolution with an activation is made without it (its kernels shared) and the
// activation runs after it, in place, as eltwise primitives (freed with the plan). Measured on ResNet-18, batch 1:
// +18% at 64x64, +4% at 128x128, +1.4% at 224x224 (oneDNN's next implementation, jit with the activation fused:
// +25% at 64x64, +5% at 224x224).
KindLimit brgemm_eltwise("dnnl_brgemm_eltwise", 512);
std::atomic<size_t> brgemm_eltwise_made{0};

bool is_brgconv(const conv_fwd::primitive_desc &pd) { return std::string(pd.impl_info_str()).rfind("brgconv", 0) == 0; }

// Eltwise primitives running ops (eltwise post-ops only) in place on memory of layout md, in order.
std::vector<Plan> eltwise_steps(const dnnl::post_ops &ops, const memory::desc &md) {
    std::vector<Plan> steps;
    for (int i = 0; i < ops.len(); ++i) {
        dnnl::algorithm alg;
        float alpha, beta;
        ops.get_params_eltwise(i, alg, alpha, beta);
        steps.emplace_back(dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
            cpu_engine(), pk::forward_inference, alg, md, md, alpha, beta, user_scratchpad())));
        steps.back().bind(DNNL_ARG_SRC, 0, false, md);
        steps.back().bind(DNNL_ARG_DST, 0, true, md);
    }
    return steps;
}

Plan make_forward(const Conv &c) {
    auto pd = c.forward(pk::forward_inference, c.fused_attr());
    bool apart = c.activation != "none" && is_brgconv(pd) && brgemm_eltwise_made.fetch_add(1) >= brgemm_eltwise.get();
    if (apart) {
        --brgemm_eltwise_made;
        pd = c.forward(pk::forward_inference, c.fused_attr(false));
    }
    Plan p{conv_fwd(pd)};
    if (apart) {
        p.after = eltwise_steps(c.activation_ops(), p.arg_md(DNNL_ARG_DST));
        p.impl += " + eltwise";
    }
    p.bind(DNNL_ARG_SRC, 0, false, c.user_act(c.x));
    p.bind(DNNL_ARG_WEIGHTS, 1, false, c.user_w());
    if (c.bias) p.bind(DNNL_ARG_BIAS, 2, false, c.bias_md());
    p.bind(DNNL_ARG_DST, 3, true, c.user_act(c.y));
    if (c.residual) p.bind(RESIDUAL_ARG, 4, false, c.user_act(c.y));
    return p;
}

Plan make_backward_data(const Conv &c) {
    auto hint = c.forward(pk::forward_training);
    dnnl::convolution_backward_data::primitive_desc pd(cpu_engine(), c.algo, c.act(c.x), c.wts(), c.act(c.y), c.stride,
                                                       c.dilation, c.pad_l, c.pad_r, hint, user_scratchpad());
    Plan p{dnnl::convolution_backward_data(pd)};
    p.bind(DNNL_ARG_DIFF_DST, 0, false, plain(c.y, tag::nchw));
    p.bind(DNNL_ARG_WEIGHTS, 1, false, c.user_w());
    p.bind(DNNL_ARG_DIFF_SRC, 2, true, plain(c.x, tag::nchw));
    return p;
}

Plan make_backward_weights(const Conv &c) {
    auto hint = c.forward(pk::forward_training);
    dnnl::convolution_backward_weights::primitive_desc pd(cpu_engine(), c.algo, c.act(c.x), c.wts(), c.act(c.y), c.stride,
                                                          c.dilation, c.pad_l, c.pad_r, hint, user_scratchpad());
    Plan p{dnnl::convolution_backward_weights(pd)};
    p.bind(DNNL_ARG_DIFF_DST, 0, false, plain(c.y, tag::nchw));
    p.bind(DNNL_ARG_SRC, 1, false, plain(c.x, tag::nchw));
    p.bind(DNNL_ARG_DIFF_WEIGHTS, 2, true, c.user_w());
    return p;
}

// layout "auto": oneDNN's preferred (blocked) layouts with reorders, or the caller's plain layout,
// whichever ran faster when the plan was made; for a channels-last caller also its NHWC activations with
// packed weights ("nhwc"). That one matters where oneDNN's "any" is blocked: for ResNet's 3-channel 7x7 stem
// (batch 8, one thread) its blocked kernel with the reorders around it took 26 ms, jit:avx512_core on the
// NHWC arrays 12-16 ms (and the plain layout's only kernel is the reference one).
std::vector<Conv> auto_layouts(const Conv &c) {
    std::vector<Conv> layouts;
    for (const char *layout : {"plain", "any", "nhwc"}) {
        if (std::string(layout) == "nhwc" && !c.channels_last) continue;
        layouts.push_back(c);
        layouts.back().layout = layout;
    }
    return layouts;
}

Plan make(const Conv &c, Plan (*maker)(const Conv &)) {
    if (c.layout != "auto") return maker(c);
    std::vector<Plan> candidates;
    for (const Conv &layout : auto_layouts(c)) candidates.push_back(maker(layout));
    return pick_faster(std::move(candidates));
}

PlanPtr forward_plan(const Conv &c) { return cached_plan(c.key("conv2d"), [&] { return make(c, make_forward); }); }
PlanPtr data_plan(const Conv &c) {
    return cached_plan(c.key("conv2d_grad_input"), [&] { return make(c, make_backward_data); });
}
PlanPtr weights_plan(const Conv &c) {
    return cached_plan(c.key("conv2d_grad_weight"), [&] { return make(c, make_backward_weights); });
}

struct Fusion {
    std::string activation;
    bool channels_last;
};

// conv2d forward on the caller's arrays; weights plain (w) or already packed.
py::array run_forward(const Tensor &X, const dims &wshape, void *w, const memory *packed, py::handle b,
                      py::handle residual, const V &stride, const V &pad_l, const V &pad_r, const V &dilation,
                      int64_t groups, const std::string &algorithm, const std::string &layout, const Fusion &f) {
    if (f.channels_last && X.shape.size() != 4)
        throw py::value_error("algoswap_dnnl conv2d: a channels-last input must be 4-D (N, H, W, C)");
    void *bias = optional_like(b, X.type, "conv2d", "bias", {wshape.at(0)}, "(out_channels,)");
    Conv c = parse("conv2d", logical(X.shape, f.channels_last), wshape, bias != nullptr, stride, pad_l, pad_r, dilation,
                   groups, algorithm, layout, f.channels_last, !residual.is_none(), f.activation, X.type);
    dims out_shape = f.channels_last ? dims{c.y[0], c.y[2], c.y[3], c.y[1]} : c.y;
    void *res = optional_like(residual, X.type, "conv2d", "residual", out_shape, "of the output (in the input's memory order)");
    py::array out = empty_like_type(X, out_shape);
    std::vector<void *> ptrs{X.data, w, bias, out.mutable_data(), res};
    if (packed == nullptr) {
        forward_plan(c)->run(ptrs);
    } else {
        memory weights = *packed;  // a reference of its own: the Python object may go while the GIL is released
        forward_plan(c)->run(ptrs, DNNL_ARG_WEIGHTS, &weights);
    }
    return out;
}

py::array forward(py::handle x, py::handle w, py::handle b, py::handle residual, const V &stride, const V &pad_l,
                  const V &pad_r, const V &dilation, int64_t groups, const std::string &algorithm,
                  const std::string &layout, const std::string &activation, bool channels_last) {
    return guarded("conv2d", [&] {
        Tensor X = check_float(x, "conv2d", "input"), W = check_float(w, "conv2d", "weight");
        if (W.type != X.type) throw py::type_error("algoswap_dnnl conv2d: argument 'weight' must have the input's dtype");
        return run_forward(X, W.shape, W.data, nullptr, b, residual, stride, pad_l, pad_r, dilation, groups, algorithm,
                           layout, {activation, channels_last});
    });
}

// The layout the forward primitive for these shapes reads its weights in: "" when it reads the plain
// weights (nothing to pack). Shapes with one layout text can share one packed copy.
std::string weights_layout(const Conv &c) {
    PlanPtr plan = forward_plan(c);
    const Slot *slot = plan->slot_of(DNNL_ARG_WEIGHTS);
    return slot == nullptr || !slot->convert ? "" : layout_text(slot->prim_md);
}

// The weights reordered once into the layout of the forward primitive for these shapes, or None
// when that primitive runs on the plain weights (nothing to save).
std::optional<Packed> pack_weights(const V &input_size, py::handle w, bool bias, bool residual, const V &stride,
                                   const V &pad_l, const V &pad_r, const V &dilation, int64_t groups,
                                   const std::string &algorithm, const std::string &layout,
                                   const std::string &activation, bool channels_last) {
    return guarded("conv2d", [&]() -> std::optional<Packed> {
        Tensor W = check_float(w, "conv2d", "weight");
        Conv c = parse("conv2d", as_dims(input_size), W.shape, bias, stride, pad_l, pad_r, dilation, groups, algorithm,
                       layout, channels_last, residual, activation, W.type);
        PlanPtr plan = forward_plan(c);
        const Slot *slot = plan->slot_of(DNNL_ARG_WEIGHTS);
        if (slot == nullptr || !slot->convert) return std::nullopt;
        auto &eng = cpu_engine();
        memory inner(slot->prim_md, eng);
        {
            py::gil_scoped_release nogil;  // W.array keeps the weights alive
            memory user(slot->user_md, eng, W.data);
            dnnl::stream stream(eng);
            slot->convert.execute(stream, user, inner);
            stream.wait();
        }
        return Packed{inner, W.shape, layout_text(slot->prim_md)};
    });
}

// conv2d_forward with weights packed by pack_weights (not reordered again).
py::array forward_packed(py::handle x, const Packed &w, py::handle b, py::handle residual, const V &stride,
                         const V &pad_l, const V &pad_r, const V &dilation, int64_t groups,
                         const std::string &algorithm, const std::string &layout, const std::string &activation,
                         bool channels_last) {
    return guarded("conv2d", [&] {
        Tensor X = check_float(x, "conv2d", "input");
        return run_forward(X, w.shape, nullptr, &w.mem, b, residual, stride, pad_l, pad_r, dilation, groups, algorithm,
                           layout, {activation, channels_last});
    });
}

py::array_t<float> backward_data(py::handle dy, py::handle w, const V &input_size, const V &stride, const V &pad_l,
                                 const V &pad_r, const V &dilation, int64_t groups, const std::string &algorithm,
                                 const std::string &layout) {
    return guarded("conv2d_grad_input", [&] {
        F32 DY = check_f32(dy, "conv2d_grad_input", "grad_output"), W = check_f32(w, "conv2d_grad_input", "weight");
        Conv c = parse("conv2d_grad_input", as_dims(input_size), W.shape, false, stride, pad_l, pad_r, dilation, groups,
                       algorithm, layout);
        if (DY.shape != c.y) throw py::value_error("algoswap_dnnl conv2d_grad_input: grad_output has the wrong shape");
        auto out = empty_f32(c.x);
        data_plan(c)->run({DY.data, W.data, out.mutable_data()});
        return out;
    });
}

py::array_t<float> backward_weights(py::handle dy, py::handle x, const V &weight_size, const V &stride, const V &pad_l,
                                    const V &pad_r, const V &dilation, int64_t groups, const std::string &algorithm,
                                    const std::string &layout) {
    return guarded("conv2d_grad_weight", [&] {
        F32 DY = check_f32(dy, "conv2d_grad_weight", "grad_output"), X = check_f32(x, "conv2d_grad_weight", "input");
        Conv c = parse("conv2d_grad_weight", X.shape, as_dims(weight_size), false, stride, pad_l, pad_r, dilation, groups,
                       algorithm, layout);
        if (DY.shape != c.y) throw py::value_error("algoswap_dnnl conv2d_grad_weight: grad_output has the wrong shape");
        auto out = empty_f32(c.w);
        weights_plan(c)->run({DY.data, X.data, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_conv(py::module_ &m) {
    m.def("brgemm_eltwise_made", [] { return brgemm_eltwise_made.load(); },
          "How many brgemm convolutions with an activation post-op this process made (oneDNN keeps their kernels).");
    auto geometry = [](auto... first) {
        return std::make_tuple(first..., py::arg("stride"), py::arg("padding_l"), py::arg("padding_r"),
                               py::arg("dilation"), py::arg("groups"), py::arg("algorithm") = "direct",
                               py::arg("layout") = "auto");
    };
    auto def = [&m](const char *name, auto fn, const char *doc, auto args) {
        std::apply([&](auto... a) { m.def(name, fn, doc, a...); }, args);
    };
    auto fused = [&geometry](auto... first) {
        return std::tuple_cat(geometry(first...), std::make_tuple(py::arg("activation") = "none", py::arg("channels_last") = false));
    };
    def("conv2d_forward", &forward,
        "activation(conv2d(input, weight) + bias + residual): NCHW input (NHWC if channels_last) with OIHW weight; "
        "bias and residual may be None; activation 'none', 'relu', 'silu', 'hardswish', or (for sums known to be finite) "
        "'relu_finite', 'relu6_finite' or 'gelu_finite'; dilation as in torch.",
        fused(py::arg("input"), py::arg("weight"), py::arg("bias").none(true), py::arg("residual").none(true)));
    def("conv2d_pack_weights", &pack_weights,
        "The weight reordered once for the conv2d_forward primitive of these shapes (a PackedWeights), "
        "or None if that primitive reads the plain weight.",
        fused(py::arg("input_size"), py::arg("weight"), py::arg("bias"), py::arg("residual")));
    def("conv2d_weights_layout",
        [](const V &x, const V &w, bool bias, bool residual, const V &s, const V &pl, const V &pr, const V &d, int64_t g,
           const std::string &a, const std::string &l, const std::string &act, bool cl, const std::string &type) {
            return guarded("conv2d", [&] {
                return weights_layout(parse("conv2d", as_dims(x), as_dims(w), bias, s, pl, pr, d, g, a, l, cl, residual, act,
                                            parse_type(type)));
            });
        },
        "The layout (a text) the conv2d_forward primitive for these shapes reads its weights in, '' if plain: "
        "shapes with one layout can share one PackedWeights.",
        std::tuple_cat(fused(py::arg("input_size"), py::arg("weight_size"), py::arg("bias"), py::arg("residual")),
                       std::make_tuple(py::arg("dtype") = "float32")));
    def("conv2d_forward_packed", &forward_packed, "conv2d_forward with a PackedWeights from conv2d_pack_weights.",
        fused(py::arg("input"), py::arg("weight"), py::arg("bias").none(true), py::arg("residual").none(true)));
    def("conv2d_backward_data", &backward_data, "Gradient of conv2d with respect to its input.",
        geometry(py::arg("grad_output"), py::arg("weight"), py::arg("input_size")));
    def("conv2d_backward_weights", &backward_weights, "Gradient of conv2d with respect to its weight.",
        geometry(py::arg("grad_output"), py::arg("input"), py::arg("weight_size")));

    def("conv2d_forward_impl",
        [](const V &x, const V &w, bool bias, bool residual, const V &s, const V &pl, const V &pr, const V &d, int64_t g,
           const std::string &a, const std::string &l, const std::string &act, bool cl, const std::string &type) {
            return guarded("conv2d", [&] {
                return info(forward_plan(parse("conv2d", as_dims(x), as_dims(w), bias, s, pl, pr, d, g, a, l, cl, residual, act,
                                               parse_type(type))));
            });
        },
        "impl_info_str() of the (cached) primitive conv2d_forward runs for these (logical NCHW) shapes.",
        std::tuple_cat(fused(py::arg("input_size"), py::arg("weight_size"), py::arg("bias"), py::arg("residual")),
                       std::make_tuple(py::arg("dtype") = "float32")));
    def("conv2d_forward_candidates",
        [](const V &x, const V &w, bool bias, bool residual, const V &s, const V &pl, const V &pr, const V &d, int64_t g,
           const std::string &a, const std::string &act, bool cl, const std::string &type) {
            return guarded("conv2d", [&] {
                std::vector<PlanInfo> found;
                for (const Conv &c : auto_layouts(parse("conv2d", as_dims(x), as_dims(w), bias, s, pl, pr, d, g, a, "auto", cl,
                                                        residual, act, parse_type(type))))
                    found.push_back(PlanInfo{make_forward(c).impl, c.layout, 0.0});
                return found;
            });
        },
        "The layouts layout='auto' times for these shapes, each as a PlanInfo whose layout is the candidate's name "
        "('plain', 'any', 'nhwc'), untimed (reference kernels among them are dropped untimed when another is real).",
        std::make_tuple(py::arg("input_size"), py::arg("weight_size"), py::arg("bias"), py::arg("residual"), py::arg("stride"),
                        py::arg("padding_l"), py::arg("padding_r"), py::arg("dilation"), py::arg("groups"),
                        py::arg("algorithm") = "direct", py::arg("activation") = "none", py::arg("channels_last") = false,
                        py::arg("dtype") = "float32"));
    def("conv2d_backward_data_impl",
        [](const V &x, const V &w, const V &s, const V &pl, const V &pr, const V &d, int64_t g, const std::string &a,
           const std::string &l) {
            return guarded("conv2d_grad_input", [&] { return info(data_plan(parse("conv2d_grad_input", as_dims(x), as_dims(w), false, s, pl, pr, d, g, a, l))); });
        },
        "impl_info_str() of the primitive conv2d_backward_data runs.", geometry(py::arg("input_size"), py::arg("weight_size")));
    def("conv2d_backward_weights_impl",
        [](const V &x, const V &w, const V &s, const V &pl, const V &pr, const V &d, int64_t g, const std::string &a,
           const std::string &l) {
            return guarded("conv2d_grad_weight", [&] { return info(weights_plan(parse("conv2d_grad_weight", as_dims(x), as_dims(w), false, s, pl, pr, d, g, a, l))); });
        },
        "impl_info_str() of the primitive conv2d_backward_weights runs.", geometry(py::arg("input_size"), py::arg("weight_size")));
}

}  // namespace algoswap_dnnl
