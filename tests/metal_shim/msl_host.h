// The interface between a kernel library compiled as host C++ and the runtime that launches it
// (msl_host_runtime.cpp). Included by metal_stdlib, so that it uses no standard header.
#pragma once

namespace msl_host {

struct Dim {
    unsigned x, y, z;
};

// One dispatch as torch.mps.compile_shader makes it: threads in the grid (dispatchThreads), threads per group.
struct Launch {
    unsigned long long grid[3];
    unsigned long long group[3];
};

// What the attributes of a kernel's parameters ([[thread_position_in_grid]], ...) give one thread.
struct Thread {
    Dim position_in_grid, position_in_threadgroup, threadgroup_position_in_grid;
    Dim threads_per_threadgroup, threads_per_grid, threadgroups_per_grid;
    unsigned index_in_threadgroup, index_in_simdgroup, simdgroup_index_in_threadgroup, threads_per_simdgroup;
};

typedef void (*Body)(void* const* args, const Thread& thread);

// Every thread of the launch: thread by thread, or (cooperative) each threadgroup's threads on threads of their own,
// one threadgroup at a time, so that barrier() and simd_sum() work and threadgroup memory is shared.
void run(const Launch& launch, bool cooperative, Body body, void* const* args);
void barrier();
float simd_sum(float value);

// A library's kernels by name (the sanitizer builds' driver looks them up here).
struct Entry {
    const char* name;
    void (*host)(const Launch* launch, void* const* args);
};

}  // namespace msl_host
