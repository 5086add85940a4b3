// Nearest and bilinear resampling of NCHW (or NHWC) arrays to an output size, forward and backward. Which
// geometries read the elements PyTorch reads is the Python side's business (resample.py).
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

using V = std::vector<int64_t>;
using pk = dnnl::prop_kind;

struct Resample {
    dims x, y;
    std::string mode;  // "nearest" or "bilinear"
    bool channels_last = false;

    dnnl::algorithm algo() const {
        return mode == "nearest" ? dnnl::algorithm::resampling_nearest : dnnl::algorithm::resampling_linear;
    }
    memory::desc src() const { return plain(x, channels_last ? tag::nhwc : tag::nchw); }
    memory::desc dst() const { return plain(y, channels_last ? tag::nhwc : tag::nchw); }
    std::string key(const char *op) const {
        return make_key(op, {x, y}, mode + (channels_last ? "/nhwc" : "/nchw"));
    }
    dnnl::resampling_forward::primitive_desc forward(pk prop, const dnnl::primitive_attr &attr) const {
        return dnnl::resampling_forward::primitive_desc(cpu_engine(), prop, algo(), src(), dst(), attr);
    }
};

Resample parse(const dims &x, const V &size, const std::string &mode) {
    const char *where = "algoswap_dnnl resample: ";
    if (x.size() != 4 || size.size() != 2) throw py::value_error(std::string(where) + "input must be 4-D and size (H, W)");
    if (mode != "nearest" && mode != "bilinear")
        throw py::value_error(std::string(where) + "mode must be 'nearest' or 'bilinear', got '" + mode + "'");
    if (size[0] < 1 || size[1] < 1 || x[2] < 1 || x[3] < 1)
        throw py::value_error(std::string(where) + "input and output sizes must be at least 1");
    return Resample{x, {x[0], x[1], size[0], size[1]}, mode};
}

PlanPtr forward_plan(const Resample &r) {
    return cached_plan(r.key("resample"), [&] {
        Plan p{dnnl::resampling_forward(r.forward(pk::forward_inference, user_scratchpad()))};
        p.bind(DNNL_ARG_SRC, 0, false, r.src());
        p.bind(DNNL_ARG_DST, 1, true, r.dst());
        return p;
    });
}

PlanPtr backward_plan(const Resample &r) {
    return cached_plan(r.key("resample_grad"), [&] {
        auto hint = r.forward(pk::forward_training, dnnl::primitive_attr());
        dnnl::resampling_backward::primitive_desc pd(cpu_engine(), r.algo(), r.src(), r.dst(), hint, user_scratchpad());
        Plan p{dnnl::resampling_backward(pd)};
        p.bind(DNNL_ARG_DIFF_DST, 0, false, r.dst());
        p.bind(DNNL_ARG_DIFF_SRC, 1, true, r.src());
        return p;
    });
}

py::array_t<float> forward(py::handle x, const V &size, const std::string &mode, bool channels_last) {
    return guarded("resample", [&] {
        F32 X = check_f32(x, "resample", "input");
        dims shape = X.shape;
        if (channels_last && shape.size() == 4) shape = {X.shape[0], X.shape[3], X.shape[1], X.shape[2]};
        Resample r = parse(shape, size, mode);
        r.channels_last = channels_last;
        auto out = empty_f32(channels_last ? dims{r.y[0], r.y[2], r.y[3], r.y[1]} : r.y);
        if (numel(r.y) > 0) forward_plan(r)->run({X.data, out.mutable_data()});
        return out;
    });
}

py::array_t<float> backward(py::handle dy, const V &input_size, const std::string &mode) {
    return guarded("resample_grad", [&] {
        F32 DY = check_f32(dy, "resample_grad", "grad_output");
        if (DY.shape.size() != 4) throw py::value_error("algoswap_dnnl resample_grad: grad_output must be 4-D");
        Resample r = parse(as_dims(input_size), {DY.shape[2], DY.shape[3]}, mode);
        if (DY.shape != r.y) throw py::value_error("algoswap_dnnl resample_grad: grad_output does not match input_size");
        auto out = empty_f32(r.x);
        if (numel(r.x) > 0) backward_plan(r)->run({DY.data, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_resample(py::module_ &m) {
    m.def("resample", &forward, "Nearest or bilinear resampling of an NCHW array (NHWC if channels_last, output likewise) "
          "to size (H, W).", py::arg("input"), py::arg("size"), py::arg("mode"), py::arg("channels_last") = false);
    m.def("resample_grad", &backward, "Gradient of resample (NCHW) for an input of input_size.", py::arg("grad_output"),
          py::arg("input_size"), py::arg("mode"));
    m.def("resample_impl",
          [](const V &x, const V &size, const std::string &mode, bool backward) {
              return guarded("resample", [&] {
                  Resample r = parse(as_dims(x), size, mode);
                  return info(backward ? backward_plan(r) : forward_plan(r));
              });
          },
          "impl_info_str() of the primitive resample (or resample_grad) runs for an NCHW input of input_size.",
          py::arg("input_size"), py::arg("size"), py::arg("mode"), py::arg("backward") = false);
}

}  // namespace algoswap_dnnl
