#include "common.hpp"

#include <algorithm>
#include <atomic>
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

// oneDNN's primitive cache may hand back a primitive made from another descriptor it deems equal
// (memory descriptors that differ only in the strides of size-1 dimensions: NCHW and NHWC with one
// channel). Its implementation can need another scratchpad, workspace or weight layout than the
// descriptor we made says (a one-channel NCHW convolution once wrote through a null scratchpad), so
// every layout a plan uses is queried from the primitive that runs.
Plan::Plan(dnnl::primitive primitive) : prim(std::move(primitive)) {
    const char *name = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_query(prim.get_primitive_desc(), dnnl_query_impl_info_str, 0, &name),
                            "could not query the primitive's implementation");
    impl = name == nullptr ? "" : name;
    scratchpad = arg_md(DNNL_ARG_SCRATCHPAD);
}

memory::desc Plan::arg_md(int arg) const {
    const_dnnl_memory_desc_t found = dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_exec_arg_md, arg);
    if (found == nullptr) return memory::desc();
    dnnl_memory_desc_t copy = nullptr;
    dnnl::error::wrap_c_api(dnnl_memory_desc_clone(&copy, found), "could not copy a memory descriptor");
    return memory::desc(copy);
}

void Plan::bind(int arg, int user, bool output, const memory::desc &user_md) {
    memory::desc prim_md = arg_md(arg);
    if (prim_md.get_ndims() == 0) throw DnnlError("oneDNN " + impl + ": the primitive takes no argument " + std::to_string(arg));
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
    for (const Plan &step : after) step.run({args.at(DNNL_ARG_DST).get_data_handle()});
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
std::unordered_map<std::string, KindLimit *> &limits() {
    static auto *all = new std::unordered_map<std::string, KindLimit *>();  // never destroyed, like the limits
    return *all;
}
KindLimit plan_limit("dnnl_plans", 1024);

struct Cache {
    std::mutex lock;
    std::list<std::string> order;  // most recently used first
    std::unordered_map<std::string, std::pair<PlanPtr, std::list<std::string>::iterator>> plans;

    void trim() {
        while (plans.size() > plan_limit.get()) {
            plans.erase(order.back());
            order.pop_back();
        }
    }
};
Cache &cache() {
    static Cache *instance = new Cache();  // never destroyed: plans may be used during interpreter exit
    return *instance;
}
}  // namespace

KindLimit::KindLimit(const char *name, size_t initial) : name_(name), value_(initial) { limits()[name_] = this; }

size_t KindLimit::get() {
    if (kind_ != nullptr && PyGILState_Check()) {
        static PyObject *size = PyUnicode_InternFromString("size");
        PyObject *value = PyObject_GetAttr(kind_, size);
        size_t n = value == nullptr ? static_cast<size_t>(-1) : PyLong_AsSize_t(value);
        Py_XDECREF(value);
        if (n == static_cast<size_t>(-1)) {
            PyErr_Clear();  // set_cache_limit only stores ints >= 0: keep the last value
        } else {
            value_ = n;
        }
    }
    return value_;
}

void KindLimit::use(const py::handle &kind) {
    auto name = kind.attr("name").cast<std::string>();
    kind.attr("size").cast<size_t>();  // a CacheKind, or a TypeError now rather than at the next call
    auto found = limits().find(name);
    if (found == limits().end()) throw py::key_error("algoswap_dnnl: no bound is named '" + name + "'");
    KindLimit &limit = *found->second;
    PyObject *previous = limit.kind_;
    limit.kind_ = kind.inc_ref().ptr();
    Py_XDECREF(previous);
    limit.get();
}

void refresh_limits() {
    for (auto &entry : limits()) entry.second->get();
}

PlanPtr cached_plan(const std::string &key, const std::function<Plan()> &make) {
    Cache &c = cache();
    std::optional<py::gil_scoped_release> nogil;
    if (PyGILState_Check()) {
        refresh_limits();
        nogil.emplace();
    }
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

dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
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

std::string type_name(dt type) { return type == dt::bf16 ? "bfloat16" : "float32"; }

dt parse_type(const std::string &name) {
    if (name == "float32") return dt::f32;
    if (name == "bfloat16") return dt::bf16;
    throw py::type_error("algoswap_dnnl: dtype must be 'float32' or 'bfloat16', got '" + name + "'");
}

memory::desc plain(const dims &shape, tag t, dt type) { return memory::desc(shape, type, t); }

dims as_dims(const std::vector<int64_t> &v) { return dims(v.begin(), v.end()); }

// Blocked layouts (every float convolution weight layout on CPU) are named exactly; other format kinds
// only by their dimensions and size, which Plan::run makes safe by comparing descriptors before use.
std::string layout_text(const memory::desc &md) {
    std::ostringstream out;
    auto list = [&out](const char *name, const dims &values) {
        out << name;
        for (auto v : values) out << v << ',';
    };
    out << "type" << static_cast<int>(md.get_data_type()) << " format" << static_cast<int>(md.get_format_kind());
    list(" dims", md.get_dims());
    list(" padded", md.get_padded_dims());
    list(" offsets", md.get_padded_offsets());
    if (md.get_format_kind() == memory::format_kind::blocked) {
        list(" strides", md.get_strides());
        list(" blocks", md.get_inner_blks());
        list(" block_dims", md.get_inner_idxs());
    }
    out << " bytes" << md.get_size();
    return out.str();
}

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
    m.def("pooled_idle_count", &pooled_idle_count, "Number of output buffers kept for reuse.");
    m.def("cache_clear", &cache_clear, "Drop every cached plan.");
    m.def("use_cache_kind", &KindLimit::use, py::arg("kind"),
          "Bound what the extension keeps by an algoswap CacheKind of a name it knows (dnnl_plans, dnnl_brgemm_eltwise, "
          "dnnl_idle_buffer_mib): its size, read again at each call made with the GIL held (set_cache_limit reaches it).");
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
    init_finite(m);
    init_reduce(m);
    init_resample(m);
}
