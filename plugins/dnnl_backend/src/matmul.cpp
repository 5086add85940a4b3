// Matrix products: linear and its gradients.
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

struct Matmul {
    int64_t m, k, n;
    bool trans_a, trans_b, bias;
    dt type = dt::f32;  // of every operand (f32 accumulation)

    // op(A) is (m, k) and op(B) is (k, n); a transposed operand is stored the other way round.
    memory::desc a() const { return memory::desc({m, k}, type, trans_a ? dims{1, m} : dims{k, 1}); }
    memory::desc b() const { return memory::desc({k, n}, type, trans_b ? dims{1, k} : dims{n, 1}); }
    std::string key() const { return make_key("matmul", {{m, k, n, trans_a, trans_b, bias}}, type_name(type)); }
};

Plan make_matmul(const Matmul &mm) {
    memory::desc bias = mm.bias ? plain({1, mm.n}, tag::ab, mm.type) : memory::desc();
    memory::desc c = plain({mm.m, mm.n}, tag::ab, mm.type);
    dnnl::matmul::primitive_desc pd(cpu_engine(), mm.a(), mm.b(), bias, c, user_scratchpad());
    Plan p;
    p.prim = dnnl::matmul(pd);
    finish(p, pd);
    p.bind(DNNL_ARG_SRC, 0, false, mm.a(), pd.src_desc());
    p.bind(DNNL_ARG_WEIGHTS, 1, false, mm.b(), pd.weights_desc());
    if (mm.bias) p.bind(DNNL_ARG_BIAS, 2, false, bias, pd.bias_desc());
    p.bind(DNNL_ARG_DST, 3, true, c, pd.dst_desc());
    return p;
}

Matmul parse(const dims &a, const dims &b, bool bias, bool trans_a, bool trans_b, dt type = dt::f32) {
    if (a.size() != 2 || b.size() != 2) throw py::value_error("algoswap_dnnl matmul: a and b must be 2-D");
    int64_t m = trans_a ? a[1] : a[0], k = trans_a ? a[0] : a[1];
    int64_t kb = trans_b ? b[1] : b[0], n = trans_b ? b[0] : b[1];
    if (k != kb) throw py::value_error("algoswap_dnnl matmul: inner dimensions differ");
    return Matmul{m, k, n, trans_a, trans_b, bias, type};
}

PlanPtr matmul_plan(const Matmul &mm) { return cached_plan(mm.key(), [&] { return make_matmul(mm); }); }

py::array matmul(py::handle a, py::handle b, py::handle bias, bool trans_a, bool trans_b) {
    return guarded("matmul", [&] {
        Tensor A = check_float(a, "matmul", "a"), B = check_float(b, "matmul", "b");
        if (B.type != A.type) throw py::type_error("algoswap_dnnl matmul: argument 'b' must have a's dtype");
        Matmul mm = parse(A.shape, B.shape, !bias.is_none(), trans_a, trans_b, A.type);
        void *bias_ptr = optional_like(bias, A.type, "matmul", "bias", {mm.n}, "(n,)");
        py::array out = empty_like_type(A, {mm.m, mm.n});
        matmul_plan(mm)->run({A.data, B.data, bias_ptr, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_matmul(py::module_ &m) {
    m.def("matmul", &matmul, "op(a) @ op(b) (+ bias), op transposing when trans_a / trans_b.", py::arg("a"),
          py::arg("b"), py::arg("bias").none(true) = py::none(), py::arg("trans_a") = false, py::arg("trans_b") = false);
    m.def("matmul_impl",
          [](const std::vector<int64_t> &a, const std::vector<int64_t> &b, bool bias, bool ta, bool tb, const std::string &type) {
              return guarded("matmul", [&] {
                  return info(matmul_plan(parse(as_dims(a), as_dims(b), bias, ta, tb, parse_type(type))));
              });
          },
          "impl_info_str() of the primitive matmul runs for these shapes.", py::arg("a_shape"), py::arg("b_shape"),
          py::arg("bias") = false, py::arg("trans_a") = false, py::arg("trans_b") = false, py::arg("dtype") = "float32");
}

}  // namespace algoswap_dnnl
