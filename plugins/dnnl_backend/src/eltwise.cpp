// Elementwise activations (relu), forward and backward, on arrays of any shape.
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using pk = dnnl::prop_kind;

memory::desc flat(int64_t size) { return plain({size}, tag::a); }

dnnl::eltwise_forward::primitive_desc relu_fwd(int64_t size, pk prop, const dnnl::primitive_attr &attr) {
    return dnnl::eltwise_forward::primitive_desc(cpu_engine(), prop, dnnl::algorithm::eltwise_relu, flat(size), flat(size),
                                                 0.f, 0.f, attr);
}

PlanPtr forward_plan(int64_t size) {
    return cached_plan(make_key("relu", {{size}}), [&] {
        auto pd = relu_fwd(size, pk::forward_inference, user_scratchpad());
        Plan p;
        p.prim = dnnl::eltwise_forward(pd);
        finish(p, pd);
        p.bind(DNNL_ARG_SRC, 0, false, flat(size), pd.src_desc());
        p.bind(DNNL_ARG_DST, 1, true, flat(size), pd.dst_desc());
        return p;
    });
}

PlanPtr backward_plan(int64_t size) {
    return cached_plan(make_key("relu_grad", {{size}}), [&] {
        auto hint = relu_fwd(size, pk::forward_training, dnnl::primitive_attr());
        dnnl::eltwise_backward::primitive_desc pd(cpu_engine(), dnnl::algorithm::eltwise_relu, flat(size), flat(size),
                                                  flat(size), 0.f, 0.f, hint, user_scratchpad());
        Plan p;
        p.prim = dnnl::eltwise_backward(pd);
        finish(p, pd);
        p.bind(DNNL_ARG_DIFF_DST, 0, false, flat(size), pd.diff_dst_desc());
        p.bind(DNNL_ARG_SRC, 1, false, flat(size), pd.src_desc());
        p.bind(DNNL_ARG_DIFF_SRC, 2, true, flat(size), pd.diff_src_desc());
        return p;
    });
}

int64_t count(const dims &shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

py::array_t<float> relu(py::handle x) {
    return guarded("relu", [&] {
        F32 X = check_f32(x, "relu", "input");
        auto out = empty_f32(X.shape);
        if (count(X.shape) > 0) forward_plan(count(X.shape))->run({X.data, out.mutable_data()});
        return out;
    });
}

py::array_t<float> relu_grad(py::handle dy, py::handle x) {
    return guarded("relu_grad", [&] {
        F32 DY = check_f32(dy, "relu_grad", "grad_output"), X = check_f32(x, "relu_grad", "input");
        if (DY.shape != X.shape) throw py::value_error("algoswap_dnnl relu_grad: grad_output and input shapes differ");
        auto out = empty_f32(X.shape);
        if (count(X.shape) > 0) backward_plan(count(X.shape))->run({DY.data, X.data, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_eltwise(py::module_ &m) {
    m.def("relu", &relu, "max(input, 0) elementwise.", py::arg("input"));
    m.def("relu_grad", &relu_grad, "grad_output where input > 0, else 0.", py::arg("grad_output"), py::arg("input"));
    m.def("relu_impl", [](int64_t size) { return guarded("relu", [&] { return info(forward_plan(size)); }); },
          "impl_info_str() of the primitive relu runs on this many elements.", py::arg("size"));
    m.def("relu_grad_impl", [](int64_t size) { return guarded("relu_grad", [&] { return info(backward_plan(size)); }); },
          "impl_info_str() of the primitive relu_grad runs on this many elements.", py::arg("size"));
}

}  // namespace algoswap_dnnl
