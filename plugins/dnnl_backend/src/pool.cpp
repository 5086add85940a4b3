// Max and average pooling, forward and backward.
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
    auto pd = p.forward(training ? pk::forward_training : pk::forward_inference, user_scratchpad());
    Plan plan;
    plan.prim = pool_fwd(pd);
    finish(plan);
    plan.bind(DNNL_ARG_SRC, 0, false, p.src(), pd.src_desc());
    plan.bind(DNNL_ARG_DST, 1, true, p.dst(), pd.dst_desc());
    if (training) plan.bind(DNNL_ARG_WORKSPACE, 2, true, pd.workspace_desc(), pd.workspace_desc());
    return plan;
}

Plan make_backward(const Pool &p) {
    auto hint = p.forward(pk::forward_training, dnnl::primitive_attr());
    dnnl::pooling_backward::primitive_desc pd(cpu_engine(), p.algo, p.src(), p.dst(), p.stride, p.kernel, p.dilation,
                                              p.pad_l, p.pad_r, hint, user_scratchpad());
    Plan plan;
    plan.prim = dnnl::pooling_backward(pd);
    finish(plan);
    plan.bind(DNNL_ARG_DIFF_DST, 0, false, p.dst(), pd.diff_dst_desc());
    plan.bind(DNNL_ARG_DIFF_SRC, 1, true, p.src(), pd.diff_src_desc());
    if (p.kind == "max") plan.bind(DNNL_ARG_WORKSPACE, 2, false, pd.workspace_desc(), pd.workspace_desc());
    return plan;
}

PlanPtr forward_plan(const Pool &p) { return cached_plan(p.key("pool2d"), [&] { return make_forward(p, false); }); }
PlanPtr training_plan(const Pool &p) { return cached_plan(p.key("pool2d_training"), [&] { return make_forward(p, true); }); }
PlanPtr backward_plan(const Pool &p) { return cached_plan(p.key("pool2d_grad"), [&] { return make_backward(p); }); }

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
        forward_plan(p)->run({X.data, out.mutable_data()});
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
        PlanPtr train = training_plan(p), back = backward_plan(p);
        std::vector<char> workspace(train->slots.back().user_md.get_size());
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
             const std::string &type) {
              return guarded("pool2d", [&] {
                  Pool p = parse(as_dims(x), k, s, d, pl, pr, kind, scale);
                  p.type = parse_type(type);
                  return info(forward_plan(p));
              });
          },
          "impl_info_str() of the primitive pool2d_forward runs.", py::arg("input_size"), py::arg("kernel"),
          py::arg("stride"), py::arg("dilation"), py::arg("padding_l"), py::arg("padding_r"), py::arg("kind"),
          py::arg("scale") = 1.f, py::arg("dtype") = "float32");
    m.def("pool2d_backward_impl",
          [](const V &x, const V &k, const V &s, const V &d, const V &pl, const V &pr, const std::string &kind) {
              return guarded("pool2d_grad", [&] { return info(backward_plan(parse(as_dims(x), k, s, d, pl, pr, kind, 1.f))); });
          },
          "impl_info_str() of the primitive pool2d_backward runs.", py::arg("input_size"), py::arg("kernel"),
          py::arg("stride"), py::arg("dilation"), py::arg("padding_l"), py::arg("padding_r"), py::arg("kind"));
}

}  // namespace algoswap_dnnl
