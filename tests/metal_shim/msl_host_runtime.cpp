// Runs a kernel library compiled as host C++ (tests/metal_host.py): every thread of a dispatch, thread by thread, or,
// for kernels that synchronise, each threadgroup's threads on threads of their own (one threadgroup at a time) with
// barriers between them. Built with -DMSL_HOST_DRIVER it is also a program that runs one kernel on buffers read from
// files and writes them back: the AddressSanitizer and ThreadSanitizer builds run that way, each buffer in an
// allocation of exactly its size.
#include "msl_host.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace msl_host {
namespace {

constexpr unsigned SIMD_WIDTH = 32;  // threads per SIMD-group on Apple GPUs

// The threads of one threadgroup: a reusable barrier, and one slot per thread for simd_sum.
class Group {
  public:
    explicit Group(unsigned count) : count_(count), slots_(count) {}

    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        const unsigned generation = generation_;
        if (++arrived_ == count_) {
            arrived_ = 0;
            ++generation_;
            ready_.notify_all();
        } else {
            ready_.wait(lock, [&] { return generation != generation_; });
        }
    }

    float& slot(unsigned index) { return slots_[index]; }
    unsigned count() const { return count_; }

  private:
    std::mutex mutex_;
    std::condition_variable ready_;
    unsigned count_, arrived_ = 0, generation_ = 0;
    std::vector<float> slots_;
};

thread_local Group* current_group = nullptr;
thread_local const Thread* current_thread = nullptr;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "msl_host: %s\n", what);
    std::abort();
}

unsigned ceil_div(unsigned long long a, unsigned long long b) { return (unsigned)((a + b - 1) / b); }

Dim dim(const unsigned long long* v) { return {(unsigned)v[0], (unsigned)v[1], (unsigned)v[2]}; }

// The threads of threadgroup `tg`: the whole group, or what is left of the grid at its edges (dispatchThreads).
Dim active_size(const Launch& launch, const Dim& tg) {
    const unsigned at[3] = {tg.x, tg.y, tg.z};
    unsigned size[3];
    for (int d = 0; d < 3; ++d) {
        const unsigned long long left = launch.grid[d] - at[d] * launch.group[d];
        size[d] = (unsigned)(left < launch.group[d] ? left : launch.group[d]);
    }
    return {size[0], size[1], size[2]};
}

Thread thread_at(const Launch& launch, const Dim& tg, const Dim& size, const Dim& local) {
    Thread t{};
    t.position_in_threadgroup = local;
    t.threadgroup_position_in_grid = tg;
    t.threads_per_threadgroup = size;
    t.threads_per_grid = dim(launch.grid);
    t.threadgroups_per_grid = {ceil_div(launch.grid[0], launch.group[0]), ceil_div(launch.grid[1], launch.group[1]),
                               ceil_div(launch.grid[2], launch.group[2])};
    t.position_in_grid = {tg.x * (unsigned)launch.group[0] + local.x, tg.y * (unsigned)launch.group[1] + local.y,
                          tg.z * (unsigned)launch.group[2] + local.z};
    t.index_in_threadgroup = (local.z * size.y + local.y) * size.x + local.x;
    t.index_in_simdgroup = t.index_in_threadgroup % SIMD_WIDTH;
    t.simdgroup_index_in_threadgroup = t.index_in_threadgroup / SIMD_WIDTH;
    t.threads_per_simdgroup = SIMD_WIDTH;
    return t;
}

void run_group(const Launch& launch, const Dim& tg, bool cooperative, Body body, void* const* args) {
    const Dim size = active_size(launch, tg);
    std::vector<Thread> threads;
    for (unsigned z = 0; z < size.z; ++z)
        for (unsigned y = 0; y < size.y; ++y)
            for (unsigned x = 0; x < size.x; ++x) threads.push_back(thread_at(launch, tg, size, {x, y, z}));
    if (!cooperative) {
        for (const Thread& t : threads) {
            current_thread = &t;
            body(args, t);
        }
        current_thread = nullptr;
        return;
    }
    Group group((unsigned)threads.size());
    std::vector<std::thread> running;
    for (const Thread& t : threads) {
        running.emplace_back([&group, &t, body, args] {
            current_group = &group;
            current_thread = &t;
            body(args, t);
        });
    }
    for (std::thread& r : running) r.join();
}

}  // namespace

void run(const Launch& launch, bool cooperative, Body body, void* const* args) {
    for (int d = 0; d < 3; ++d) {
        if (launch.group[d] == 0) fail("a threadgroup size of 0");
        if (launch.grid[d] == 0) return;
    }
    const Dim groups = {ceil_div(launch.grid[0], launch.group[0]), ceil_div(launch.grid[1], launch.group[1]),
                        ceil_div(launch.grid[2], launch.group[2])};
    for (unsigned z = 0; z < groups.z; ++z)
        for (unsigned y = 0; y < groups.y; ++y)
            for (unsigned x = 0; x < groups.x; ++x) run_group(launch, {x, y, z}, cooperative, body, args);
}

void barrier() {
    if (current_group == nullptr) fail("threadgroup_barrier in a kernel run thread by thread: launch it cooperatively");
    current_group->wait();
}

// Every thread of the threadgroup must call it (as every thread of a SIMD-group must on the GPU): the sum of the
// values of the caller's SIMD-group, in lane order.
float simd_sum(float value) {
    Group* group = current_group;
    if (group == nullptr) fail("simd_sum in a kernel run thread by thread: launch it cooperatively");
    const Thread& t = *current_thread;
    group->slot(t.index_in_threadgroup) = value;
    group->wait();
    const unsigned first = t.simdgroup_index_in_threadgroup * SIMD_WIDTH;
    const unsigned last = first + SIMD_WIDTH < group->count() ? first + SIMD_WIDTH : group->count();
    float sum = 0.0f;
    for (unsigned i = first; i < last; ++i) sum += group->slot(i);
    group->wait();  // no thread writes its slot again before every thread has read its SIMD-group's
    return sum;
}

}  // namespace msl_host

#ifdef MSL_HOST_DRIVER
extern "C" const msl_host::Entry msl_host_entries[];

// driver KERNEL GX GY GZ TX TY TZ FOLDER COUNT: runs KERNEL on the buffers FOLDER/arg0.bin ... (COUNT of them),
// then writes every buffer back to its file.
int main(int argc, char** argv) {
    if (argc != 10) {
        std::fprintf(stderr, "usage: %s KERNEL GX GY GZ TX TY TZ FOLDER COUNT\n", argv[0]);
        return 2;
    }
    const msl_host::Entry* entry = msl_host_entries;
    while (entry->name != nullptr && std::strcmp(entry->name, argv[1]) != 0) ++entry;
    if (entry->name == nullptr) {
        std::fprintf(stderr, "no kernel %s\n", argv[1]);
        return 2;
    }
    msl_host::Launch launch{};
    for (int d = 0; d < 3; ++d) {
        launch.grid[d] = std::strtoull(argv[2 + d], nullptr, 10);
        launch.group[d] = std::strtoull(argv[5 + d], nullptr, 10);
    }
    const int count = std::atoi(argv[9]);
    std::vector<void*> buffers(count);
    std::vector<long> sizes(count);
    for (int i = 0; i < count; ++i) {
        const std::string path = std::string(argv[8]) + "/arg" + std::to_string(i) + ".bin";
        std::FILE* file = std::fopen(path.c_str(), "rb");
        if (file == nullptr) return 3;
        std::fseek(file, 0, SEEK_END);
        sizes[i] = std::ftell(file);
        std::fseek(file, 0, SEEK_SET);
        buffers[i] = std::malloc(sizes[i]);  // exactly its size: a read past it is reported
        if (std::fread(buffers[i], 1, sizes[i], file) != (size_t)sizes[i]) return 3;
        std::fclose(file);
    }
    entry->host(&launch, buffers.data());
    for (int i = 0; i < count; ++i) {
        const std::string path = std::string(argv[8]) + "/arg" + std::to_string(i) + ".bin";
        std::FILE* file = std::fopen(path.c_str(), "wb");
        if (file == nullptr || std::fwrite(buffers[i], 1, sizes[i], file) != (size_t)sizes[i]) return 3;
        std::fclose(file);
        std::free(buffers[i]);
    }
    return 0;
}
#endif
