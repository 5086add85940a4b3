// Shared by every op family: the engine, per-thread streams, plans (a cached primitive with the
// reorders between the caller's plain arrays and the layouts it prefers) and the plan cache.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
    std::string impl;
    std::vector<Slot> slots;
    memory::desc scratchpad;

    // Adds a slot; a reorder is made (once, here) only when the layouts differ.
    void bind(int arg, int user, bool output, const memory::desc &user_md, const memory::desc &prim_md);
    // Runs the primitive on the caller's buffers (one per user index; nullptr skips that slot).
    // Releases the GIL: the caller keeps the buffers alive.
    void run(const std::vector<void *> &ptrs) const;
};

using PlanPtr = std::shared_ptr<const Plan>;

// Plans keyed by everything that defines their primitives; created once, shared by threads.
PlanPtr cached_plan(const std::string &key, const std::function<Plan()> &make);
size_t cache_size();
void cache_clear();

// A primitive_attr with a user-managed scratchpad (each run allocates its own: thread safe).
dnnl::primitive_attr user_scratchpad();
void finish(Plan &plan, const dnnl::primitive_desc &pd);

memory::desc plain(const dims &shape, tag t);
memory::desc strided(const dims &shape, const dims &strides);

// Checked view of a float32 C-contiguous array; anything else raises a TypeError naming op and argument.
struct F32 {
    py::array array;
    float *data;
    dims shape;
};
F32 check_f32(const py::handle &obj, const char *op, const char *name);
py::array_t<float> empty_f32(const dims &shape);
dims as_dims(const std::vector<int64_t> &v);

std::string make_key(const char *op, std::initializer_list<dims> parts, const std::string &extra = "");

// Raised to Python as algoswap_dnnl._dnnl.DnnlError (a RuntimeError).
struct DnnlError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Runs body, turning a dnnl::error into a DnnlError naming the op.
template <typename F>
auto guarded(const char *op, F &&body) -> decltype(body()) {
    try {
        return body();
    } catch (const dnnl::error &e) {
        throw DnnlError(std::string("oneDNN ") + op + ": " + e.what() + " (dnnl_status_t " +
                        std::to_string(static_cast<int>(e.status)) + ")");
    }
}

void init_conv(py::module_ &m);
void init_matmul(py::module_ &m);
void init_pool(py::module_ &m);
void init_eltwise(py::module_ &m);

}  // namespace algoswap_dnnl
