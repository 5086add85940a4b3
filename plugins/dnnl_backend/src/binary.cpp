// Binary add, sub, mul and div (src1 broadcast over src0 where its dimensions are 1; binary and eltwise
// post-ops) and concatenation.
#include "common.hpp"

namespace algoswap_dnnl {
namespace {

// An operation applied to a binary op's result inside the primitive: binary (add, sub, mul, div)
// with one more array (of a shape that broadcasts to a's, like b), or eltwise linear / pow.
struct Post {
    std::string kind;
    dims shape;  // of the array of a binary post-op
    float alpha = 0.f, beta = 0.f;

    bool eltwise() const { return kind == "linear" || kind == "pow"; }
    std::string key() const {
        if (eltwise()) return kind + "(" + float_text(alpha) + "," + float_text(beta) + ")";
        std::string k = kind + "[";
        for (auto d : shape) k += std::to_string(d) + ",";
        return k + "]";
    }
};

// a (op) b (post-ops...): a has the output's shape; b has a's rank, each dimension equal to a's or
// 1. Equal shapes (post-op arrays included) are seen as one flat array.
struct Add {
    dims a, b;
    dt type = dt::f32;
    std::string kind = "add";  // add, sub, mul or div
    std::vector<Post> post;

    bool flat() const {
        for (const Post &p : post)
            if (!p.eltwise() && p.shape != a) return false;
        return a == b;
    }
    memory::desc view(const dims &shape) const {
        if (flat()) return plain({numel(shape)}, tag::a, type);
        memory::desc md = dense(shape);
        return memory::desc(md.get_dims(), type, md.get_strides());
    }
    std::string key() const {
        std::string k = type_name(type);
        for (const Post &p : post) k += "/" + p.key();
        return make_key(kind.c_str(), {a, b}, k);
    }
};

dnnl::algorithm binary_kind(const std::string &kind) {
    if (kind == "add") return dnnl::algorithm::binary_add;
    if (kind == "sub") return dnnl::algorithm::binary_sub;
    if (kind == "mul") return dnnl::algorithm::binary_mul;
    if (kind == "div") return dnnl::algorithm::binary_div;
    throw py::value_error("algoswap_dnnl binary: kind must be 'add', 'sub', 'mul' or 'div', got '" + kind + "'");
}

void check_broadcast(const dims &a, const dims &b, const std::string &where, const std::string &name) {
    if (a.size() != b.size() || a.empty())
        throw py::value_error(where + "a and " + name + " must have one rank (>= 1): pad " + name +
                              "'s shape with leading 1s");
    for (size_t i = 0; i < a.size(); ++i)
        if (b[i] != a[i] && b[i] != 1)
            throw py::value_error(where + name + " must broadcast to a's shape (oneDNN broadcasts only src1): "
                                  "each dimension of " + name + " equal to a's or 1");
}

Add parse_add(const dims &a, const dims &b, const std::string &kind = "add") {
    binary_kind(kind);
    check_broadcast(a, b, "algoswap_dnnl " + kind + ": ", "b");
    return Add{a, b, dt::f32, kind, {}};
}

// A post-op of s: (kind, shape of its array (binary) or None (eltwise), alpha, beta).
void add_post(Add &s, const std::string &kind, const std::optional<dims> &shape, float alpha, float beta) {
    std::string where = "algoswap_dnnl " + s.kind + ": post-op " + std::to_string(s.post.size()) + ": ";
    Post p{kind, shape.value_or(dims{}), alpha, beta};
    if (!p.eltwise()) {
        binary_kind(kind);
        if (!shape) throw py::value_error(where + "a binary post-op needs an array");
        check_broadcast(s.a, *shape, where, "its array");
    }
    s.post.push_back(p);
}

PlanPtr add_plan(const Add &s) {
    return cached_plan(s.key(), [&] {
        dnnl::primitive_attr attr = user_scratchpad();
        dnnl::post_ops ops;
        for (const Post &p : s.post) {
            if (p.eltwise())
                ops.append_eltwise(p.kind == "pow" ? dnnl::algorithm::eltwise_pow : dnnl::algorithm::eltwise_linear, p.alpha,
                                   p.beta);
            else
                ops.append_binary(binary_kind(p.kind), s.view(p.shape));
        }
        attr.set_post_ops(ops);
        dnnl::binary::primitive_desc pd(cpu_engine(), binary_kind(s.kind), s.view(s.a), s.view(s.b), s.view(s.a), attr);
        Plan p{dnnl::binary(pd)};
        p.bind(DNNL_ARG_SRC_0, 0, false, s.view(s.a));
        p.bind(DNNL_ARG_SRC_1, 1, false, s.view(s.b));
        p.bind(DNNL_ARG_DST, 2, true, s.view(s.a));
        int user = 3;
        for (size_t i = 0; i < s.post.size(); ++i)
            if (!s.post[i].eltwise())
                p.bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, user++, false, s.view(s.post[i].shape));
        return p;
    });
}

// post: (kind, array or None, alpha, beta) tuples.
py::array binary(py::handle a, py::handle b, const std::string &kind, const std::vector<py::tuple> &post) {
    return guarded(kind.c_str(), [&] {
        Tensor A = check_float(a, kind.c_str(), "a"), B = check_float(b, kind.c_str(), "b");
        if (B.type != A.type) throw py::type_error("algoswap_dnnl " + kind + ": argument 'b' must have a's dtype");
        Add s = parse_add(A.shape, B.shape, kind);
        s.type = A.type;
        std::vector<void *> ptrs{A.data, B.data, nullptr};
        std::vector<Tensor> arrays;
        for (size_t i = 0; i < post.size(); ++i) {
            if (post[i].size() != 4) throw py::value_error("algoswap_dnnl " + kind + ": post-ops are (kind, array or None, alpha, beta)");
            std::optional<dims> shape;
            if (!post[i][1].is_none()) {
                std::string name = "post[" + std::to_string(i) + "]";
                arrays.push_back(check_float(post[i][1], kind.c_str(), name.c_str()));
                if (arrays.back().type != A.type)
                    throw py::type_error("algoswap_dnnl " + kind + ": argument '" + name + "' must have a's dtype");
                shape = arrays.back().shape;
                ptrs.push_back(arrays.back().data);
            }
            add_post(s, post[i][0].cast<std::string>(), shape, post[i][2].cast<float>(), post[i][3].cast<float>());
        }
        py::array out = empty_like_type(A, A.shape);
        ptrs[2] = out.mutable_data();
        if (numel(A.shape) > 0) add_plan(s)->run(ptrs);
        return out;
    });
}

// Concatenation of (outer, n_i, inner) arrays along dimension 1; empty inputs are left out.
struct Concat {
    int64_t outer, inner;
    std::vector<int64_t> sizes;  // n_i of each non-empty input

    memory::desc part(int64_t n) const { return plain({outer, n, inner}, tag::abc); }
    int64_t total() const {
        int64_t t = 0;
        for (auto n : sizes) t += n;
        return t;
    }
    std::string key() const { return make_key("concat", {{outer, inner}, dims(sizes.begin(), sizes.end())}); }
};

PlanPtr concat_plan(const Concat &c) {
    return cached_plan(c.key(), [&] {
        std::vector<memory::desc> srcs;
        for (auto n : c.sizes) srcs.push_back(c.part(n));
        memory::desc dst = c.part(c.total());
        dnnl::concat::primitive_desc pd(cpu_engine(), dst, 1, srcs, user_scratchpad());
        Plan p{dnnl::concat(pd)};
        for (size_t i = 0; i < srcs.size(); ++i)
            p.bind(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), static_cast<int>(i), false, srcs[i]);
        p.bind(DNNL_ARG_DST, static_cast<int>(srcs.size()), true, dst);
        return p;
    });
}

// Shapes -> (the Concat of the non-empty ones, output shape, index of each non-empty input).
std::tuple<Concat, dims, std::vector<size_t>> parse_concat(const std::vector<dims> &shapes, int64_t axis) {
    const char *where = "algoswap_dnnl concat: ";
    if (shapes.empty()) throw py::value_error(std::string(where) + "needs at least one input");
    auto rank = static_cast<int64_t>(shapes[0].size());
    if (rank < 1 || axis < -rank || axis >= rank)
        throw py::value_error(std::string(where) + "axis " + std::to_string(axis) + " is out of range for " +
                              std::to_string(rank) + "-D inputs");
    if (axis < 0) axis += rank;
    dims out = shapes[0];
    out[axis] = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const dims &s = shapes[i];
        bool same = static_cast<int64_t>(s.size()) == rank;
        for (int64_t d = 0; same && d < rank; ++d) same = d == axis || s[d] == shapes[0][d];
        if (!same)
            throw py::value_error(std::string(where) + "inputs[" + std::to_string(i) + "] differs from inputs[0] "
                                  "other than along the axis");
        out[axis] += s[axis];
    }
    Concat c{1, 1, {}};
    for (int64_t d = 0; d < axis; ++d) c.outer *= out[d];
    for (int64_t d = axis + 1; d < rank; ++d) c.inner *= out[d];
    std::vector<size_t> used;
    for (size_t i = 0; i < shapes.size(); ++i)
        if (shapes[i][axis] > 0) {
            c.sizes.push_back(shapes[i][axis]);
            used.push_back(i);
        }
    return {c, out, used};
}

py::array_t<float> concat(const std::vector<py::handle> &inputs, int64_t axis) {
    return guarded("concat", [&] {
        std::vector<F32> arrays;
        std::vector<dims> shapes;
        for (size_t i = 0; i < inputs.size(); ++i) {
            std::string name = "inputs[" + std::to_string(i) + "]";
            arrays.push_back(check_f32(inputs[i], "concat", name.c_str()));
            shapes.push_back(arrays.back().shape);
        }
        auto [c, out_shape, used] = parse_concat(shapes, axis);
        auto out = empty_f32(out_shape);
        if (numel(out_shape) == 0) return out;
        std::vector<void *> ptrs;
        for (size_t i : used) ptrs.push_back(arrays[i].data);
        ptrs.push_back(out.mutable_data());
        concat_plan(c)->run(ptrs);
        return out;
    });
}

}  // namespace

void init_binary(py::module_ &m) {
    m.def("add", [](py::handle a, py::handle b) { return binary(a, b, "add", {}); },
          "a + b, b broadcast over a (same rank, each dimension of b equal to a's or 1).", py::arg("a"), py::arg("b"));
    m.def("binary", &binary,
          "a (kind: 'add', 'sub', 'mul' or 'div') b, b broadcast over a as in add, then the post-ops in order: "
          "(binary kind, array broadcast like b, 0, 0) or ('linear' | 'pow', None, alpha, beta).",
          py::arg("a"), py::arg("b"), py::arg("kind"), py::arg("post") = std::vector<py::tuple>{});
    m.def("binary_impl",
          [](const std::vector<int64_t> &a, const std::vector<int64_t> &b, const std::string &kind, const std::string &type,
             const std::vector<std::tuple<std::string, std::optional<std::vector<int64_t>>, float, float>> &post) {
              return guarded(kind.c_str(), [&] {
                  Add s = parse_add(as_dims(a), as_dims(b), kind);
                  s.type = parse_type(type);
                  for (const auto &[k, shape, alpha, beta] : post)
                      add_post(s, k, shape ? std::optional<dims>(as_dims(*shape)) : std::nullopt, alpha, beta);
                  return info(add_plan(s));
              });
          },
          "impl_info_str() of the primitive binary runs for these shapes and post-ops ((kind, shape or None, alpha, beta)).",
          py::arg("a_shape"), py::arg("b_shape"), py::arg("kind"), py::arg("dtype") = "float32",
          py::arg("post") = std::vector<std::tuple<std::string, std::optional<std::vector<int64_t>>, float, float>>{});
    m.def("add_impl",
          [](const std::vector<int64_t> &a, const std::vector<int64_t> &b, const std::string &type) {
              return guarded("add", [&] {
                  Add s = parse_add(as_dims(a), as_dims(b));
                  s.type = parse_type(type);
                  return info(add_plan(s));
              });
          },
          "impl_info_str() of the primitive add runs for these shapes.", py::arg("a_shape"), py::arg("b_shape"),
          py::arg("dtype") = "float32");
    m.def("concat", &concat, "The inputs joined along axis (shapes equal elsewhere).", py::arg("inputs"), py::arg("axis") = 0);
    m.def("concat_impl",
          [](const std::vector<std::vector<int64_t>> &shapes, int64_t axis) {
              return guarded("concat", [&] {
                  std::vector<dims> ds;
                  for (auto &s : shapes) ds.push_back(as_dims(s));
                  auto [c, out_shape, used] = parse_concat(ds, axis);
                  if (numel(out_shape) == 0) throw py::value_error("algoswap_dnnl concat: the output is empty (no primitive runs)");
                  return info(concat_plan(c));
              });
          },
          "impl_info_str() of the primitive concat runs for these input shapes.", py::arg("shapes"), py::arg("axis") = 0);
}

}  // namespace algoswap_dnnl
