#include "common.hpp"

#include <algorithm>
#include <chrono>
#include <list>
#include <optional>
#include <sstream>

namespace algoswap_dnnl {

dnnl::engine &cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

static dnnl::stream &thread_stream() {
    thread_local dnnl::stream stream(cpu_engine());
    return stream;
}

void Plan::bind(int arg, int user, bool output, const memory::desc &user_md, const memory::desc &prim_md) {
    Slot slot{arg, user, output, user_md, prim_md, dnnl::reorder()};
    if (user_md != prim_md) {
        if (arg != DNNL_ARG_WEIGHTS) layout = "blocked";  // activations reordered at each run
        auto &eng = cpu_engine();
        slot.convert = output ? dnnl::reorder(dnnl::reorder::primitive_desc(eng, prim_md, eng, user_md))
                              : dnnl::reorder(dnnl::reorder::primitive_desc(eng, user_md, eng, prim_md));
    }
    slots.push_back(std::move(slot));
}

const Slot *Plan::slot_of(int arg) const {
    for (const Slot &slot : slots)
        if (slot.arg == arg) return &slot;
    return nullptr;
}

void Plan::run(const std::vector<void *> &ptrs, int packed_arg, const memory *packed) const {
    auto &eng = cpu_engine();
    std::optional<py::gil_scoped_release> nogil;
    if (PyGILState_Check()) nogil.emplace();
    auto &stream = thread_stream();
    std::unordered_map<int, memory> args;
    std::vector<std::pair<const Slot *, std::pair<memory, memory>>> outputs;
    for (const Slot &slot : slots) {
        if (packed != nullptr && slot.arg == packed_arg && !slot.output) {
            if (packed->get_desc() == slot.prim_md) {
                args.emplace(slot.arg, *packed);
            } else {  // the plan was remade (evicted) with another layout since packing: reorder for this run
                memory src = *packed, inner(slot.prim_md, eng);
                dnnl::reorder(src, inner).execute(stream, src, inner);
                args.emplace(slot.arg, inner);
            }
            continue;
        }
        void *ptr = ptrs.at(slot.user);
        if (ptr == nullptr) continue;
        memory user(slot.user_md, eng, ptr);
        if (!slot.convert) {
            args.emplace(slot.arg, user);
            continue;
        }
        memory inner(slot.prim_md, eng);
        if (slot.output)
            outputs.push_back({&slot, {inner, user}});
        else
            slot.convert.execute(stream, user, inner);
        args.emplace(slot.arg, inner);
    }
    if (scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad, eng));
    prim.execute(stream, args);
    for (auto &out : outputs) out.first->convert.execute(stream, out.second.first, out.second.second);
    stream.wait();
}

namespace {
// Scratch buffers for every caller-side slot of a plan (zeros: timing does not depend on values).
struct Scratch {
    std::vector<std::vector<char>> buffers;
    std::vector<void *> ptrs;
    explicit Scratch(const Plan &plan) {
        for (const Slot &slot : plan.slots) {
            if (static_cast<size_t>(slot.user) >= buffers.size()) buffers.resize(slot.user + 1);
            buffers[slot.user].assign(std::max<size_t>(slot.user_md.get_size(), 1), 0);
        }
        for (auto &b : buffers) ptrs.push_back(b.empty() ? nullptr : b.data());
    }
};

double timed_run(const Plan &plan, const Scratch &scratch) {
    auto start = std::chrono::steady_clock::now();
    plan.run(scratch.ptrs);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

// Candidates are timed in turns (so that a burst of load elsewhere hits them alike), best of up
// to 5 turns, fewer once 50 ms have been spent.
Plan pick_faster(std::vector<Plan> candidates) {
    // oneDNN's reference kernels are never the faster one, and timing one on a large layer takes
    // seconds: they are dropped untimed whenever a real kernel is among the candidates.
    auto reference = [](const Plan &plan) { return plan.impl.rfind("ref", 0) == 0; };
    if (!std::all_of(candidates.begin(), candidates.end(), reference))
        candidates.erase(std::remove_if(candidates.begin(), candidates.end(), reference), candidates.end());
    if (candidates.size() == 1) return std::move(candidates.front());
    std::vector<Scratch> scratch;
    for (const Plan &plan : candidates) {
        scratch.emplace_back(plan);
        plan.run(scratch.back().ptrs);
    }
    std::vector<double> best(candidates.size(), 1e300);
    double spent = 0;
    for (int turn = 0; turn < 5 && (turn < 2 || spent < 50); ++turn)
        for (size_t i = 0; i < candidates.size(); ++i) {
            double ms = timed_run(candidates[i], scratch[i]);
            best[i] = std::min(best[i], ms);
            spent += ms;
        }
    size_t pick = std::min_element(best.begin(), best.end()) - best.begin();
    candidates[pick].ms = best[pick];
    return std::move(candidates[pick]);
}

PlanInfo info(const PlanPtr &plan) { return PlanInfo{plan->impl, plan->layout, plan->ms}; }

namespace {
struct Cache {
    std::mutex lock;
    size_t capacity = 1024;
    std::list<std::string> order;  // most recently used first
    std::unordered_map<std::string, std::pair<PlanPtr, std::list<std::string>::iterator>> plans;

    void trim() {
        while (plans.size() > capacity) {
            plans.erase(order.back());
            order.pop_back();
        }
    }
};
Cache &cache() {
    static Cache instance;
    return instance;
}
}  // namespace

PlanPtr cached_plan(const std::string &key, const std::function<Plan()> &make) {
    std::optional<py::gil_scoped_release> nogil;
    if (PyGILState_Check()) nogil.emplace();
    Cache &c = cache();
    std::lock_guard<std::mutex> guard(c.lock);
    auto found = c.plans.find(key);
    if (found != c.plans.end()) {
        c.order.splice(c.order.begin(), c.order, found->second.second);
        return found->second.first;
    }
    auto plan = std::make_shared<const Plan>(make());
    c.order.push_front(key);
    c.plans.emplace(key, std::make_pair(plan, c.order.begin()));
    c.trim();
    return plan;
}

size_t cache_size() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> guard(cache().lock);
    return cache().plans.size();
}

void cache_clear() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> guard(cache().lock);
    cache().plans.clear();
    cache().order.clear();
}

void set_cache_capacity(size_t capacity) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> guard(cache().lock);
    cache().capacity = capacity;
    cache().trim();
}

dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
}

// oneDNN's primitive cache may hand back a primitive made from another descriptor it deems equal
// (memory descriptors that differ only in the strides of size-1 dimensions: NCHW and NHWC with one
// channel). Its implementation can need another scratchpad than the descriptor we made says, so the
// scratchpad and the kernel name are read from the primitive that runs, never from our descriptor.
void finish(Plan &plan) {
    const_dnnl_primitive_desc_t pd = plan.prim.get_primitive_desc();
    const char *impl = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl),
                            "could not query the primitive's implementation");
    plan.impl = impl == nullptr ? "" : impl;
    dnnl_memory_desc_t scratchpad = nullptr;
    const_dnnl_memory_desc_t found = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (found != nullptr) dnnl::error::wrap_c_api(dnnl_memory_desc_clone(&scratchpad, found), "could not copy the scratchpad");
    plan.scratchpad = scratchpad == nullptr ? memory::desc() : memory::desc(scratchpad);
}

memory::desc plain(const dims &shape, tag t) { return memory::desc(shape, dt::f32, t); }

memory::desc strided(const dims &shape, const dims &strides) { return memory::desc(shape, dt::f32, strides); }

memory::desc dense(const dims &shape) {
    dims strides(shape.size(), 1);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
    return strided(shape, strides);
}

int64_t numel(const dims &shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::string float_text(float value) {
    std::ostringstream out;
    out << std::hexfloat << value;
    return out.str();
}

static std::string shape_text(const py::array &a) {
    std::ostringstream out;
    out << "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) out << (i ? ", " : "") << a.shape(i);
    out << (a.ndim() == 1 ? ",)" : ")");
    return out.str();
}

F32 check_f32(const py::handle &obj, const char *op, const char *name) {
    std::string where = std::string("algoswap_dnnl ") + op + ": argument '" + name + "' ";
    if (!py::isinstance<py::array>(obj))
        throw py::type_error(where + "must be a numpy.ndarray, got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    auto array = py::reinterpret_borrow<py::array>(obj);
    if (!array.dtype().equal(py::dtype::of<float>()))
        throw py::type_error(where + "must be float32, got " + std::string(py::str(array.dtype())) + " array of shape " + shape_text(array));
    if (!(array.flags() & py::array::c_style))
        throw py::value_error(where + "must be C-contiguous (pass numpy.ascontiguousarray(...)); got a strided array of shape " + shape_text(array));
    dims shape(array.shape(), array.shape() + array.ndim());
    return F32{array, static_cast<float *>(const_cast<void *>(array.data())), shape};
}

std::string type_name(dt type) { return type == dt::bf16 ? "bfloat16" : "float32"; }

dt parse_type(const std::string &name) {
    if (name == "float32") return dt::f32;
    if (name == "bfloat16") return dt::bf16;
    throw py::type_error("algoswap_dnnl: dtype must be 'float32' or 'bfloat16', got '" + name + "'");
}

memory::desc plain(const dims &shape, tag t, dt type) { return memory::desc(shape, type, t); }

Tensor check_float(const py::handle &obj, const char *op, const char *name) {
    std::string where = std::string("algoswap_dnnl ") + op + ": argument '" + name + "' ";
    if (!py::isinstance<py::array>(obj))
        throw py::type_error(where + "must be a numpy.ndarray, got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    auto array = py::reinterpret_borrow<py::array>(obj);
    std::string dtype = py::str(array.dtype());
    dt type;
    if (array.dtype().equal(py::dtype::of<float>())) type = dt::f32;
    else if (dtype == "bfloat16" && array.itemsize() == 2) type = dt::bf16;
    else throw py::type_error(where + "must be float32 or bfloat16, got " + dtype + " array of shape " + shape_text(array));
    if (!(array.flags() & py::array::c_style))
        throw py::value_error(where + "must be C-contiguous (pass numpy.ascontiguousarray(...)); got a strided array of shape " + shape_text(array));
    dims shape(array.shape(), array.shape() + array.ndim());
    return Tensor{array, const_cast<void *>(array.data()), shape, type};
}

void *optional_like(const py::handle &obj, dt type, const char *op, const char *name, const dims &expected,
                    const std::string &what) {
    if (obj.is_none()) return nullptr;
    Tensor t = check_float(obj, op, name);
    std::string where = std::string("algoswap_dnnl ") + op + ": argument '" + name + "' ";
    if (t.type != type) throw py::type_error(where + "must be " + type_name(type) + " like the input, got " + type_name(t.type));
    if (t.shape != expected) throw py::value_error(where + "must have shape " + what);
    return t.data;  // the caller's argument keeps the array alive
}

namespace {
// Output buffers of 1 MiB and more are kept when their array dies and handed out again for the same
// size: fresh memory costs a page fault per 4 KiB page at first touch (a VGG-16 112x112 layer took
// 12 ms on fresh output memory, 6 ms on reused memory). At most 1 GiB is kept idle.
struct BufferPool {
    static constexpr size_t min_bytes = size_t(1) << 20, max_idle = size_t(1) << 30, header = 64;
    std::mutex lock;
    std::unordered_multimap<size_t, void *> idle;
    size_t idle_bytes = 0;
};

BufferPool &buffer_pool() {
    static BufferPool *pool = new BufferPool();  // never destroyed: arrays may die after static destruction
    return *pool;
}

void *acquire_buffer(size_t bytes) {
    BufferPool &pool = buffer_pool();
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        auto found = pool.idle.find(bytes);
        if (found != pool.idle.end()) {
            void *buffer = found->second;
            pool.idle.erase(found);
            pool.idle_bytes -= bytes;
            return buffer;
        }
    }
    size_t rounded = (bytes + BufferPool::header - 1) / BufferPool::header * BufferPool::header;
    auto *raw = static_cast<char *>(std::aligned_alloc(BufferPool::header, BufferPool::header + rounded));
    if (raw == nullptr) throw std::bad_alloc();
    *reinterpret_cast<size_t *>(raw) = bytes;  // the size, in the header before the buffer
    return raw + BufferPool::header;
}

void release_buffer(void *buffer) {
    char *raw = static_cast<char *>(buffer) - BufferPool::header;
    size_t bytes = *reinterpret_cast<size_t *>(raw);
    BufferPool &pool = buffer_pool();
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        if (pool.idle_bytes + bytes <= BufferPool::max_idle) {
            pool.idle.emplace(bytes, buffer);
            pool.idle_bytes += bytes;
            return;
        }
    }
    std::free(raw);
}

py::array pooled_array(const py::dtype &dtype, const dims &shape) {
    std::vector<py::ssize_t> s(shape.begin(), shape.end());
    size_t bytes = static_cast<size_t>(dtype.itemsize());
    for (auto d : shape) bytes *= static_cast<size_t>(d);
    if (bytes < BufferPool::min_bytes) return py::array(dtype, s);
    void *buffer = acquire_buffer(bytes);
    py::capsule owner(buffer, [](void *b) { release_buffer(b); });
    return py::array(dtype, s, std::vector<py::ssize_t>{}, buffer, owner);
}
}  // namespace

py::array empty_like_type(const Tensor &like, const dims &shape) { return pooled_array(like.array.dtype(), shape); }

py::array_t<float> empty_f32(const dims &shape) {
    return py::reinterpret_steal<py::array_t<float>>(pooled_array(py::dtype::of<float>(), shape).release());
}

size_t pooled_idle_bytes() {
    std::lock_guard<std::mutex> guard(buffer_pool().lock);
    return buffer_pool().idle_bytes;
}

dims as_dims(const std::vector<int64_t> &v) { return dims(v.begin(), v.end()); }

std::string make_key(const char *op, std::initializer_list<dims> parts, const std::string &extra) {
    std::ostringstream out;
    out << op;
    for (const dims &d : parts) {
        out << '|';
        for (auto v : d) out << v << ',';
    }
    out << '|' << extra;
    return out.str();
}

}  // namespace algoswap_dnnl

PYBIND11_MODULE(_dnnl, m) {
    using namespace algoswap_dnnl;
    m.doc() = "oneDNN primitives for algoswap (float32, plain NCHW arrays in and out)";
    py::register_exception<DnnlError>(m, "DnnlError", PyExc_RuntimeError);
    py::class_<Packed>(m, "PackedWeights",
                       "Weights reordered once into a primitive's layout; pass to the *_packed functions.")
        .def_property_readonly("shape", [](const Packed &p) { return std::vector<int64_t>(p.shape.begin(), p.shape.end()); })
        .def_property_readonly("nbytes", [](const Packed &p) { return p.mem.get_desc().get_size(); })
        .def_readonly("key", &Packed::key)
        .def("__repr__", [](const Packed &p) { return "PackedWeights(key='" + p.key + "')"; });
    py::class_<PlanInfo>(m, "PlanInfo", "A cached plan: its kernel (impl_info_str), layout and measured ms (0 if not timed).")
        .def_readonly("impl", &PlanInfo::impl)
        .def_readonly("layout", &PlanInfo::layout)
        .def_readonly("ms", &PlanInfo::ms)
        .def("__str__", [](const PlanInfo &i) { return i.impl; })
        .def("__repr__", [](const PlanInfo &i) {
            return "PlanInfo(impl='" + i.impl + "', layout='" + i.layout + "', ms=" + std::to_string(i.ms) + ")";
        });
    m.def("cache_size", &cache_size, "Number of cached plans (primitives with their reorders).");
    m.def("pooled_idle_bytes", &pooled_idle_bytes, "Bytes of output buffers kept for reuse (1 MiB and larger).");
    m.def("cache_clear", &cache_clear, "Drop every cached plan.");
    m.def("set_cache_capacity", &set_cache_capacity, py::arg("capacity"), "Keep at most this many plans (LRU).");
    m.def("version", []() {
        const dnnl_version_t *v = dnnl_version();
        return py::make_tuple(v->major, v->minor, v->patch, std::string(v->hash), v->cpu_runtime);
    }, "(major, minor, patch, git hash, cpu runtime) of the oneDNN library loaded.");
    init_conv(m);
    init_matmul(m);
    init_pool(m);
    init_eltwise(m);
    init_norm(m);
    init_softmax(m);
    init_binary(m);
    init_transpose(m);
}
