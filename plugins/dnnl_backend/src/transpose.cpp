// transpose: a reorder primitive from the input read through permuted strides into a dense output.
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

// Output dimension d is input dimension perm[d].
struct Transpose {
    dims input, perm;

    dims output() const {
        dims out(perm.size());
        for (size_t d = 0; d < perm.size(); ++d) out[d] = input[perm[d]];
        return out;
    }
    memory::desc source() const {  // the input seen in the output's dimension order
        dims stored = dense(input).get_strides(), strides(perm.size());
        for (size_t d = 0; d < perm.size(); ++d) strides[d] = stored[perm[d]];
        return strided(output(), strides);
    }
};

Transpose parse(const dims &input, const dims &perm) {
    const char *where = "algoswap_dnnl transpose: ";
    if (input.empty()) throw py::value_error(std::string(where) + "input must have at least one dimension");
    std::vector<bool> seen(input.size(), false);
    if (perm.size() != input.size()) throw py::value_error(std::string(where) + "perm must have one entry per input dimension");
    for (auto d : perm) {
        if (d < 0 || d >= static_cast<int64_t>(input.size()) || seen[d])
            throw py::value_error(std::string(where) + "perm must be a permutation of 0..rank-1");
        seen[d] = true;
    }
    return Transpose{input, perm};
}

PlanPtr transpose_plan(const Transpose &t) {
    return cached_plan(make_key("transpose", {t.input, t.perm}), [&] {
        memory::desc src = t.source(), dst = dense(t.output());
        dnnl::reorder::primitive_desc pd(cpu_engine(), src, cpu_engine(), dst, user_scratchpad());
        Plan p{dnnl::reorder(pd)};
        p.bind(DNNL_ARG_FROM, 0, false, src);
        p.bind(DNNL_ARG_TO, 1, true, dst);
        return p;
    });
}

py::array_t<float> transpose(py::handle x, const std::vector<int64_t> &perm) {
    return guarded("transpose", [&] {
        F32 X = check_f32(x, "transpose", "input");
        Transpose t = parse(X.shape, as_dims(perm));
        auto out = empty_f32(t.output());
        if (numel(X.shape) > 0) transpose_plan(t)->run({X.data, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_transpose(py::module_ &m) {
    m.def("transpose", &transpose, "The input with output dimension d taken from input dimension perm[d] (a copy).",
          py::arg("input"), py::arg("perm"));
    m.def("transpose_impl",
          [](const std::vector<int64_t> &input, const std::vector<int64_t> &perm) {
              return guarded("transpose", [&] { return info(transpose_plan(parse(as_dims(input), as_dims(perm)))); });
          },
          "impl_info_str() of the reorder transpose runs for this input shape and perm.", py::arg("input_size"),
          py::arg("perm"));
}

}  // namespace algoswap_dnnl
