// The arrays Python hands in (checked, never copied) and the arrays handed back (large ones from a
// pool of reused buffers).
#include <cstdlib>
#include <iterator>
#include <list>
#include <sstream>

#include "common.hpp"

namespace algoswap_dnnl {
namespace {
std::string shape_text(const py::array &a) {
    std::ostringstream out;
    out << "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) out << (i ? ", " : "") << a.shape(i);
    out << (a.ndim() == 1 ? ",)" : ")");
    return out.str();
}
}  // namespace

F32 check_f32(const py::handle &obj, const char *op, const char *name) {
    auto where = [&] { return std::string("algoswap_dnnl ") + op + ": argument '" + name + "' "; };
    if (!py::isinstance<py::array>(obj))
        throw py::type_error(where() + "must be a numpy.ndarray, got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    auto array = py::reinterpret_borrow<py::array>(obj);
    if (!array.dtype().equal(py::dtype::of<float>()))
        throw py::type_error(where() + "must be float32, got " + std::string(py::str(array.dtype())) + " array of shape " + shape_text(array));
    if (!(array.flags() & py::array::c_style))
        throw py::value_error(where() + "must be C-contiguous (pass numpy.ascontiguousarray(...)); got a strided array of shape " + shape_text(array));
    dims shape(array.shape(), array.shape() + array.ndim());
    return F32{array, static_cast<float *>(const_cast<void *>(array.data())), shape};
}

Tensor check_float(const py::handle &obj, const char *op, const char *name) {
    // The checks come first and the messages only on failure: this runs for every array of every call.
    auto where = [&] { return std::string("algoswap_dnnl ") + op + ": argument '" + name + "' "; };
    if (!py::isinstance<py::array>(obj))
        throw py::type_error(where() + "must be a numpy.ndarray, got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    auto array = py::reinterpret_borrow<py::array>(obj);
    dt type = dt::f32;
    if (!array.dtype().equal(py::dtype::of<float>())) {
        std::string dtype = py::str(array.dtype());
        if (dtype != "bfloat16" || array.itemsize() != 2)
            throw py::type_error(where() + "must be float32 or bfloat16, got " + dtype + " array of shape " + shape_text(array));
        type = dt::bf16;
    }
    if (!(array.flags() & py::array::c_style))
        throw py::value_error(where() + "must be C-contiguous (pass numpy.ascontiguousarray(...)); got a strided array of shape " + shape_text(array));
    dims shape(array.shape(), array.shape() + array.ndim());
    return Tensor{array, const_cast<void *>(array.data()), shape, type};
}

void *optional_like(const py::handle &obj, dt type, const char *op, const char *name, const dims &expected,
                    const std::string &what) {
    if (obj.is_none()) return nullptr;
    Tensor t = check_float(obj, op, name);
    auto where = [&] { return std::string("algoswap_dnnl ") + op + ": argument '" + name + "' "; };
    if (t.type != type) throw py::type_error(where() + "must be " + type_name(type) + " like the input, got " + type_name(t.type));
    if (t.shape != expected) throw py::value_error(where() + "must have shape " + what);
    return t.data;  // the caller's argument keeps the array alive
}

namespace {
// Output buffers of 1 MiB and more are kept when their array dies and handed out again for the same
// size: fresh memory costs a page fault per 4 KiB page at first touch (a VGG-16 112x112 layer took
// 12 ms on fresh output memory, 6 ms on reused memory). At most dnnl_idle_buffer_mib MiB are kept idle,
// the least recently released freed first: the sizes a program stopped using (input shapes it no longer
// sees) go, those of the shapes it runs now stay.
KindLimit idle_mib("dnnl_idle_buffer_mib", 1024);

struct BufferPool {
    static constexpr size_t min_bytes = size_t(1) << 20, header = 64;
    using Idle = std::list<std::pair<size_t, void *>>;  // (bytes, buffer), most recently released first
    std::mutex lock;
    Idle idle;
    std::unordered_multimap<size_t, Idle::iterator> by_size;
    size_t idle_bytes = 0;

    void *take(size_t bytes) {
        auto found = by_size.find(bytes);
        if (found == by_size.end()) return nullptr;
        void *buffer = found->second->second;
        idle.erase(found->second);
        by_size.erase(found);
        idle_bytes -= bytes;
        return buffer;
    }
    // Keeps buffer; returns the least recently released buffers beyond `limit` bytes, for the caller to free.
    std::vector<void *> keep(size_t bytes, void *buffer, size_t limit) {
        idle.emplace_front(bytes, buffer);
        by_size.emplace(bytes, idle.begin());
        idle_bytes += bytes;
        std::vector<void *> dropped;
        while (idle_bytes > limit) {
            auto [size, oldest] = idle.back();
            dropped.push_back(oldest);
            auto range = by_size.equal_range(size);
            for (auto it = range.first; it != range.second; ++it)
                if (it->second == std::prev(idle.end())) {
                    by_size.erase(it);
                    break;
                }
            idle.pop_back();
            idle_bytes -= size;
        }
        return dropped;
    }
};

BufferPool &buffer_pool() {
    static BufferPool *pool = new BufferPool();  // never destroyed: arrays may die after static destruction
    return *pool;
}

void *acquire_buffer(size_t bytes) {
    BufferPool &pool = buffer_pool();
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        if (void *buffer = pool.take(bytes)) return buffer;
    }
    size_t rounded = (bytes + BufferPool::header - 1) / BufferPool::header * BufferPool::header;
    auto *raw = static_cast<char *>(std::aligned_alloc(BufferPool::header, BufferPool::header + rounded));
    if (raw == nullptr) throw std::bad_alloc();
    *reinterpret_cast<size_t *>(raw) = bytes;  // the size, in the header before the buffer
    return raw + BufferPool::header;
}

void free_buffer(void *buffer) { std::free(static_cast<char *>(buffer) - BufferPool::header); }

void release_buffer(void *buffer) {
    size_t bytes = *reinterpret_cast<size_t *>(static_cast<char *>(buffer) - BufferPool::header);
    size_t limit = idle_mib.get() << 20;
    BufferPool &pool = buffer_pool();
    std::vector<void *> dropped;
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        dropped = pool.keep(bytes, buffer, limit);
    }
    for (void *old : dropped) free_buffer(old);
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

size_t pooled_idle_count() {
    std::lock_guard<std::mutex> guard(buffer_pool().lock);
    return buffer_pool().idle.size();
}

}  // namespace algoswap_dnnl
