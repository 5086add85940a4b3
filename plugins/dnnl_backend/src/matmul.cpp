// Matrix products: linear, matmul, batch_matmul and their gradients.
#include <algorithm>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {

// Batched when a and b have more than two dimensions: one rank, each batch dimension equal to the
// other's or 1 (oneDNN broadcasts it). The operands are C-contiguous as stored; a transposed one is
// read through swapped strides, never copied.
struct Matmul {
    dims a_batch, b_batch;  // leading dimensions (empty for 2-D)
    int64_t m, k, n;
    bool trans_a, trans_b, bias;
    dt type = dt::f32;  // of every operand (f32 accumulation)

    // op(A) is (..., m, k) and op(B) is (..., k, n); a transposed operand is stored the other way round.
    memory::desc a() const { return operand(a_batch, m, k, trans_a); }
    memory::desc b() const { return operand(b_batch, k, n, trans_b); }
    memory::desc c() const { return memory::desc(with(out_batch(), m, n), type, dense(with(out_batch(), m, n)).get_strides()); }
    dims out_batch() const {
        dims out = a_batch;
        for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(a_batch[i], b_batch[i]);
        return out;
    }
    static dims with(dims batch, int64_t rows, int64_t cols) {
        batch.push_back(rows);
        batch.push_back(cols);
        return batch;
    }
    memory::desc operand(const dims &batch, int64_t rows, int64_t cols, bool transposed) const {
        dims stored_strides = dense(with(batch, transposed ? cols : rows, transposed ? rows : cols)).get_strides();
        if (transposed) std::swap(stored_strides[batch.size()], stored_strides[batch.size() + 1]);
        return memory::desc(with(batch, rows, cols), type, stored_strides);
    }
    std::string key() const { return make_key("matmul", {a_batch, b_batch, {m, k, n, trans_a, trans_b, bias}}, type_name(type)); }
};

Plan make_matmul(const Matmul &mm) {
    dims bias_dims(mm.a_batch.size() + 2, 1);
    bias_dims.back() = mm.n;
    memory::desc bias = mm.bias ? memory::desc(bias_dims, mm.type, dense(bias_dims).get_strides()) : memory::desc();
    memory::desc c = mm.c();
    dnnl::matmul::primitive_desc pd(cpu_engine(), mm.a(), mm.b(), bias, c, user_scratchpad());
    Plan p{dnnl::matmul(pd)};
    p.bind(DNNL_ARG_SRC, 0, false, mm.a());
    p.bind(DNNL_ARG_WEIGHTS, 1, false, mm.b());
    if (mm.bias) p.bind(DNNL_ARG_BIAS, 2, false, bias);
    p.bind(DNNL_ARG_DST, 3, true, c);
    return p;
}

Matmul parse(const dims &a, const dims &b, bool bias, bool trans_a, bool trans_b, dt type = dt::f32) {
    const char *where = "algoswap_dnnl matmul: ";
    if (a.size() < 2 || a.size() != b.size())
        throw py::value_error(std::string(where) + "a and b must have one rank >= 2 (pad the batch dimensions with 1s)");
    size_t r = a.size();
    if (bias && r != 2) throw py::value_error(std::string(where) + "a bias is taken only with 2-D a and b");
    dims a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    for (size_t i = 0; i + 2 < r; ++i)
        if (a_batch[i] != b_batch[i] && a_batch[i] != 1 && b_batch[i] != 1)
            throw py::value_error(std::string(where) + "batch dimension " + std::to_string(i) + " of a and b differ and neither is 1");
    int64_t m = trans_a ? a[r - 1] : a[r - 2], k = trans_a ? a[r - 2] : a[r - 1];
    int64_t kb = trans_b ? b[r - 1] : b[r - 2], n = trans_b ? b[r - 2] : b[r - 1];
    if (k != kb) throw py::value_error(std::string(where) + "inner dimensions differ");
    return Matmul{a_batch, b_batch, m, k, n, trans_a, trans_b, bias, type};
}

PlanPtr matmul_plan(const Matmul &mm) { return cached_plan(mm.key(), [&] { return make_matmul(mm); }); }

py::array matmul(py::handle a, py::handle b, py::handle bias, bool trans_a, bool trans_b) {
    return guarded("matmul", [&] {
        Tensor A = check_float(a, "matmul", "a"), B = check_float(b, "matmul", "b");
        if (B.type != A.type) throw py::type_error("algoswap_dnnl matmul: argument 'b' must have a's dtype");
        Matmul mm = parse(A.shape, B.shape, !bias.is_none(), trans_a, trans_b, A.type);
        void *bias_ptr = optional_like(bias, A.type, "matmul", "bias", {mm.n}, "(n,)");
        py::array out = empty_like_type(A, Matmul::with(mm.out_batch(), mm.m, mm.n));
        matmul_plan(mm)->run({A.data, B.data, bias_ptr, out.mutable_data()});
        return out;
    });
}

}  // namespace

void init_matmul(py::module_ &m) {
    m.def("matmul", &matmul, "op(a) @ op(b) (+ bias, 2-D only), op transposing the last two axes when trans_a / trans_b; "
          "batch dimensions (one rank) broadcast where one is 1.", py::arg("a"),
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
