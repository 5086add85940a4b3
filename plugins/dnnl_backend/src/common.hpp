// Shared by every op family: the engine, per-thread streams, plans (a cached primitive with the
// reorders between the caller's plain arrays and the layouts it prefers) and the plan cache.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace algoswap_dnnl {

namespace py = pybind11;
using dnnl::memory;
using dims = memory::dims;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine &cpu_engine();

// One argument of a primitive: the caller's buffer (plain layout) and the primitive's layout.
struct Slot {
    int arg;            // DNNL_ARG_*
    int user;           // index of the caller's pointer in Plan::run's list
    bool output;
    memory::desc user_md, prim_md;
    dnnl::reorder convert;  // user -> prim for inputs, prim -> user for outputs; empty if same layout
};

struct Plan {
    dnnl::primitive prim;
    std::string impl;    // impl_info_str() of the primitive
    std::string layout = "plain";  // "plain": activations in the caller's layout; "blocked": reordered at each run
    double ms = 0;       // when chosen by pick_faster: the measured time per run
    std::vector<Slot> slots;
    memory::desc scratchpad;
    // Plans run after the primitive, in place on its output (in the primitive's layout), in order: an activation
    // made apart from its convolution (conv.cpp says when). Each reads and writes its user buffer 0.
    std::vector<Plan> after;

    // Everything a plan says about its primitive (kernel name, scratchpad, each argument's layout) is
    // read from the primitive itself, never from the descriptor it was made from: oneDNN's primitive
    // cache can hand back a primitive made from another descriptor that compares equal (see common.cpp).
    explicit Plan(dnnl::primitive primitive);
    // The memory descriptor the primitive reads or writes for argument arg (DNNL_ARG_*; empty if none).
    memory::desc arg_md(int arg) const;
    // Adds a slot: the caller's buffer (layout user_md) for argument arg, in the layout arg_md(arg); a
    // reorder is made (once, here) only when the two differ.
    void bind(int arg, int user, bool output, const memory::desc &user_md);
    // Runs the primitive on the caller's buffers (one per user index; nullptr skips that slot).
    // Releases the GIL if held: the caller keeps the buffers alive.
    // packed, if given, replaces the slot of argument packed_arg: memory already in some layout
    // (normally the primitive's own, as made by prepack; any other is reordered for this run).
    void run(const std::vector<void *> &ptrs, int packed_arg = -1, const memory *packed = nullptr) const;
    // The slot of argument arg, or nullptr.
    const Slot *slot_of(int arg) const;
};

// An argument reordered once into a primitive's layout (e.g. constant conv weights), owned by Python.
struct Packed {
    memory mem;      // in mem.get_desc(): the layout of the primitive it was made for
    dims shape;      // the caller's (plain) shape
    std::string key; // layout_text of mem's layout
};

// A text naming a memory layout exactly (dimensions, data type, blocking and padding).
std::string layout_text(const memory::desc &md);

// relu as post-ops that keep NaN where PyTorch's relu does (eltwise.cpp says how).
void append_exact_relu(dnnl::post_ops &ops);

// The candidate that runs fastest here (measured once, when the plan is made).
Plan pick_faster(std::vector<Plan> candidates);

using PlanPtr = std::shared_ptr<const Plan>;

// What the *_impl functions return to Python: the plan's kernel, layout and measured time.
struct PlanInfo {
    std::string impl, layout;
    double ms;
};
PlanInfo info(const PlanPtr &plan);

// A bound of the extension, set by an algoswap cache kind of the same name (use_cache_kind): its size, read
// again by get() whenever the GIL is held (algoswap.set_cache_limit reaches it), the last value read otherwise.
class KindLimit {
  public:
    KindLimit(const char *name, size_t initial);
    size_t get();
    static void use(const py::handle &kind);  // the KindLimit named kind.name reads kind.size from now on

  private:
    std::string name_;
    std::atomic<size_t> value_;
    PyObject *kind_ = nullptr;  // a new reference, never released: it outlives us
};

// Plans keyed by everything that defines their primitives; created once, shared by threads.
// Least recently used plans beyond the dnnl_plans kind's size are dropped (1024 until it is given).
// make() runs without the GIL and must not touch Python objects.
PlanPtr cached_plan(const std::string &key, const std::function<Plan()> &make);
size_t cache_size();
void cache_clear();
// Read by cached_plan while it holds the GIL: the limits plan makers use without it.
void refresh_limits();

// A primitive_attr with a user-managed scratchpad (each run allocates its own: thread safe).
dnnl::primitive_attr user_scratchpad();

memory::desc plain(const dims &shape, tag t);
memory::desc strided(const dims &shape, const dims &strides);
// Row-major (C-contiguous) layout of any rank.
memory::desc dense(const dims &shape);
int64_t numel(const dims &shape);
// A float for cache keys, exactly (hexfloat): 1e-7 and 0 must not share a key.
std::string float_text(float value);

// Checked view of a float32 C-contiguous array; anything else raises a TypeError naming op and argument.
struct F32 {
    py::array array;
    float *data;
    dims shape;
};
F32 check_f32(const py::handle &obj, const char *op, const char *name);
py::array_t<float> empty_f32(const dims &shape);  // large outputs come from a pool of reused buffers
size_t pooled_idle_bytes();
size_t pooled_idle_count();

// Checked view of a float32 or bfloat16 (numpy arrays of ml_dtypes.bfloat16) C-contiguous array.
struct Tensor {
    py::array array;
    void *data;
    dims shape;
    dt type;
};
Tensor check_float(const py::handle &obj, const char *op, const char *name);
// The same argument again (bias, residual): of `type`, C-contiguous, shape `expected`; nullptr for None.
void *optional_like(const py::handle &obj, dt type, const char *op, const char *name, const dims &expected,
                    const std::string &what);
// A new array of `like`'s dtype.
py::array empty_like_type(const Tensor &like, const dims &shape);
memory::desc plain(const dims &shape, tag t, dt type);
std::string type_name(dt type);
dt parse_type(const std::string &name);
dims as_dims(const std::vector<int64_t> &v);

// NaN and infinity (finite.cpp): one parallel pass over float32 or bfloat16 data.
bool all_finite(const void *data, dt type, int64_t count);
bool any_nan(const void *data, dt type, int64_t count);
// to[i] = from[i] wherever from[i] is a NaN.
void restore_nan(const void *from, void *to, dt type, int64_t count);
// to[i] = from[i] wherever from[i] >= threshold > 0 (+inf and NaN included; threshold exact in bfloat16 for bfloat16 data).
void restore_at_least(const void *from, void *to, dt type, int64_t count, float threshold);

std::string make_key(const char *op, std::initializer_list<dims> parts, const std::string &extra = "");

// Raised to Python as algoswap_dnnl._dnnl.DnnlError (a RuntimeError).
struct DnnlError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

inline const char *status_name(dnnl_status_t status) {
    switch (status) {
        case dnnl_out_of_memory: return "out_of_memory";
        case dnnl_invalid_arguments: return "invalid_arguments";
        case dnnl_unimplemented: return "unimplemented";
        case dnnl_last_impl_reached: return "last_impl_reached";
        case dnnl_runtime_error: return "runtime_error";
        case dnnl_not_required: return "not_required";
        default: return "error";
    }
}

// Runs body, turning a dnnl::error into a DnnlError naming the op.
template <typename F>
auto guarded(const char *op, F &&body) -> decltype(body()) {
    try {
        return body();
    } catch (const dnnl::error &e) {
        throw DnnlError(std::string("oneDNN ") + op + ": " + e.what() + " (status: " + status_name(e.status) + ")");
    }
}

void init_conv(py::module_ &m);
void init_matmul(py::module_ &m);
void init_pool(py::module_ &m);
void init_eltwise(py::module_ &m);
void init_norm(py::module_ &m);
void init_softmax(py::module_ &m);
void init_binary(py::module_ &m);
void init_transpose(py::module_ &m);
void init_finite(py::module_ &m);
void init_reduce(py::module_ &m);
void init_resample(py::module_ &m);

}  // namespace algoswap_dnnl
