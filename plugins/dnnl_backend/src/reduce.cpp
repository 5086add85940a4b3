// Sum, mean or maximum along the rows of an (outer, n) array: the reduction primitive, whose jit kernel
// oneDNN 3.2 has only for reductions over the innermost elements in memory (the Python side sees an
// array of any rank and memory order so, or uses a pooling window where the reduced elements are not
// innermost).
#include <cmath>
#include <limits>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

struct Reduce {
    int64_t outer, n;
    std::string kind;  // "sum", "mean" or "max"

    dnnl::algorithm algo() const {
        if (kind == "sum") return dnnl::algorithm::reduction_sum;
        if (kind == "mean") return dnnl::algorithm::reduction_mean;
        return dnnl::algorithm::reduction_max;
    }
    memory::desc src() const { return plain({outer, n}, tag::ab); }
    memory::desc dst() const { return plain({outer, 1}, tag::ab); }
};

Reduce parse(int64_t outer, int64_t n, const std::string &kind) {
    const char *where = "algoswap_dnnl reduce: ";
    if (kind != "sum" && kind != "mean" && kind != "max")
        throw py::value_error(std::string(where) + "kind must be 'sum', 'mean' or 'max', got '" + kind + "'");
    if (outer < 1 || n < 1) throw py::value_error(std::string(where) + "the array must have elements");
    return Reduce{outer, n, kind};
}

PlanPtr reduce_plan(const Reduce &r) {
    return cached_plan(make_key("reduce", {{r.outer, r.n}}, r.kind), [&] {
        dnnl::reduction::primitive_desc pd(cpu_engine(), r.algo(), r.src(), r.dst(), 0.f, 0.f, user_scratchpad());
        Plan p{dnnl::reduction(pd)};
        p.bind(DNNL_ARG_SRC, 0, false, r.src());
        p.bind(DNNL_ARG_DST, 1, true, r.dst());
        return p;
    });
}

// PyTorch's maximum where the input is not all finite (oneDNN's drops NaN): NaN for a row holding one.
void exact_max(const Reduce &r, const float *x, float *y) {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < r.outer; ++o) {
        const float *row = x + o * r.n;
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < r.n && !std::isnan(best); ++i) best = std::isnan(row[i]) || row[i] > best ? row[i] : best;
        y[o] = best;
    }
}

py::array_t<float> reduce(py::handle x, const std::string &kind) {
    return guarded("reduce", [&] {
        F32 X = check_f32(x, "reduce", "input");
        if (X.shape.size() != 2) throw py::value_error("algoswap_dnnl reduce: input must be 2-D (rows reduced along axis 1)");
        Reduce r = parse(X.shape[0], X.shape[1], kind);
        auto out = empty_f32({r.outer});
        if (kind == "max" && !all_finite(X.data, dt::f32, numel(X.shape)))
            exact_max(r, X.data, out.mutable_data());
        else
            reduce_plan(r)->run({X.data, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_reduce(py::module_ &m) {
    m.def("reduce", &reduce, "The sum, mean or maximum (kind) of each row of a C-contiguous 2-D array: shape (rows,).",
          py::arg("input"), py::arg("kind"));
    m.def("reduce_impl",
          [](int64_t outer, int64_t n, const std::string &kind) {
              return guarded("reduce", [&] { return info(reduce_plan(parse(outer, n, kind))); });
          },
          "impl_info_str() of the primitive reduce runs for rows x n.", py::arg("rows"), py::arg("n"), py::arg("kind"));
}

}  // namespace algoswap_dnnl
