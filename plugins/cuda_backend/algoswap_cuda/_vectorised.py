"""Kernels that read and write 16 bytes at a time (8 float16 or bfloat16 values, 4 float32, 2 float64) where the
arrays allow it, else one value: layer norm and softmax with one warp per row (rows up to ``WARP_ROWS`` long), and
the add of two arrays of one shape (a residual connection). On the H200 their predecessors were far from the
memory bandwidth (ViT-B/16 at batch 32 in bfloat16: 26 µs per layer norm of 32×197×768 and 206 µs per softmax of
32×12×197×197, each a block of threads per row with tree reductions; 24 µs per CuPy add).

The arithmetic is the block kernels' (``_passes``) and CuPy's: layer norm two-pass in T (float32 for the half
precisions), ``(x - mean) * rstd`` then the weight and the bias; softmax as ``exp(x - max) / sum``; the add as
``(S)((T)a + (T)b)``. A warp's lanes are ``min(32, blockDim.x)``: the host harness (tests/cuda_host.py) runs a
block of one thread, one lane per row.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._types import prelude, scalar
from ._runtime import dtype_name

WARP_ROWS = 4096  # longest row for a warp (longer ones: _passes' block per row)
THREADS, _MOST_BLOCKS = 128, 65536
PACK = """struct __align__({vec} * sizeof(S)) Pack {{ S v[{vec}]; }};  // one load: 16 bytes where vec * sizeof(S) is
"""

_LAYER_NORM = PACK + """__device__ inline T lane_sum(T v, int lanes) {{
    for (int offset = lanes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}}
extern "C" __global__ void {name}(const S* x, const S* w, const S* b, S* y, long long rows, int d, T eps) {{
    const int lanes = blockDim.x < 32 ? blockDim.x : 32, lane = threadIdx.x % lanes, packs = d / {vec};
    const long long per_block = blockDim.x / lanes, warps = (long long)gridDim.x * per_block;
    for (long long row = blockIdx.x * per_block + threadIdx.x / lanes; row < rows; row += warps) {{
        const Pack* in = (const Pack*)(x + row * d);
        Pack* out = (Pack*)(y + row * d);
        T s = 0;
        for (int p = lane; p < packs; p += lanes) {{ const Pack a = in[p]; for (int e = 0; e < {vec}; ++e) s += (T)a.v[e]; }}
        const T mean = lane_sum(s, lanes) / d;
        T q = 0;
        for (int p = lane; p < packs; p += lanes) {{
            const Pack a = in[p];
            for (int e = 0; e < {vec}; ++e) {{ const T c = (T)a.v[e] - mean; q += c * c; }}
        }}
        const T rstd = (T)1 / sqrt(lane_sum(q, lanes) / d + eps);
        for (int p = lane; p < packs; p += lanes) {{
            const Pack a = in[p];
            Pack o;
            for (int e = 0; e < {vec}; ++e) {{
                T v = ((T)a.v[e] - mean) * rstd;
                {weight}
                {bias}
                o.v[e] = (S)v;
            }}
            out[p] = o;
        }}
    }}
}}
"""

# softmax(scale * x) over each row, one warp per row: _passes' arithmetic (products rounded on their own, so inf - inf
# stays NaN; a NaN is the maximum of its row; with safe, a row whose every score is -inf gives zeros)
_SOFTMAX = PACK + """__device__ inline float mul_rn(float a, float b) {{ return __fmul_rn(a, b); }}
__device__ inline double mul_rn(double a, double b) {{ return __dmul_rn(a, b); }}
__device__ inline T larger(T m, T v) {{ return (v > m || v != v) ? v : m; }}
extern "C" __global__ void {name}(const S* x, S* y, long long rows, int d, T scale, T lowest) {{
    const int lanes = blockDim.x < 32 ? blockDim.x : 32, lane = threadIdx.x % lanes, packs = d / {vec};
    const long long per_block = blockDim.x / lanes, warps = (long long)gridDim.x * per_block;
    for (long long row = blockIdx.x * per_block + threadIdx.x / lanes; row < rows; row += warps) {{
        const Pack* in = (const Pack*)(x + row * d);
        Pack* out = (Pack*)(y + row * d);
        T m = lowest;
        for (int p = lane; p < packs; p += lanes) {{ const Pack a = in[p]; for (int e = 0; e < {vec}; ++e) m = larger(m, mul_rn((T)a.v[e], scale)); }}
        for (int offset = lanes / 2; offset > 0; offset >>= 1) m = larger(m, __shfl_xor_sync(0xffffffffu, m, offset));
        T s = 0;
        for (int p = lane; p < packs; p += lanes) {{ const Pack a = in[p]; for (int e = 0; e < {vec}; ++e) s += exp(mul_rn((T)a.v[e], scale) - m); }}
        for (int offset = lanes / 2; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
        const bool none = {safe} && m == lowest;  // every score -inf: no key is seen
        for (int p = lane; p < packs; p += lanes) {{
            const Pack a = in[p];
            Pack o;
            for (int e = 0; e < {vec}; ++e) o.v[e] = none ? (S)(T)0 : (S)(exp(mul_rn((T)a.v[e], scale) - m) / s);
            out[p] = o;
        }}
    }}
}}
"""

_ADD = PACK + """extern "C" __global__ void {name}(const S* a, const S* b, S* y, long long n) {{
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    const long long packs = n / {vec};
    for (long long i = first; i < packs; i += step) {{
        const Pack p = ((const Pack*)a)[i], q = ((const Pack*)b)[i];
        Pack o;
        for (int e = 0; e < {vec}; ++e) o.v[e] = (S)((T)p.v[e] + (T)q.v[e]);
        ((Pack*)y)[i] = o;
    }}
    for (long long i = packs * {vec} + first; i < n; i += step) y[i] = (S)((T)a[i] + (T)b[i]);
}}
"""


def stride_blocks(items: int) -> int:
    """Blocks of THREADS for a grid-stride loop over ``items`` (at most _MOST_BLOCKS, at least one)."""
    return min(-(-items // THREADS), _MOST_BLOCKS) or 1


def width(dtype: Any, *arrays: Any, length: int) -> int:
    """Values per load: 16 bytes' worth where ``length`` is a multiple of it and every array starts 16-byte aligned, else 1."""
    vec = 16 // np.dtype(dtype).itemsize
    return vec if length % vec == 0 and all(_address(a) % 16 == 0 for a in arrays) else 1


def _address(a: Any) -> int:
    """Where ``a``'s data starts: in device memory (a host address for the NumPy arrays of the host harness)."""
    return int(a.ctypes.data) if isinstance(a, np.ndarray) else int(a.data.ptr)


def layer_norm_source(dtype: str, weight: bool, bias: bool, vec: int) -> tuple[str, str]:
    """The CUDA source of the warp-per-row layer norm for this (dtype, weight, bias, values per load), and its name."""
    name = f"algoswap_layer_norm_warp_{dtype}{'_w' * weight}{'_b' * bias}_v{vec}"
    j = f"p * {vec} + e"  # the value's place in its row
    return prelude(dtype) + _LAYER_NORM.format(name=name, vec=vec, weight=f"v = v * (T)w[{j}];" if weight else "",
                                               bias=f"v = v + (T)b[{j}];" if bias else ""), name


def softmax_source(dtype: str, safe: bool, vec: int) -> tuple[str, str]:
    """The CUDA source of the warp-per-row softmax for this (dtype, safe, values per load), and its name."""
    name = f"algoswap_softmax_warp_{dtype}{'_safe' * safe}_v{vec}"
    return prelude(dtype) + _SOFTMAX.format(name=name, vec=vec, safe="true" if safe else "false"), name


def add_source(dtype: str, vec: int) -> tuple[str, str]:
    """The CUDA source of the same-shape add for this (dtype, values per load), and its name."""
    name = f"algoswap_add_{dtype}_v{vec}"
    return prelude(dtype) + _ADD.format(name=name, vec=vec), name


@lru_cache(maxsize=32)  # every (dtype, weight, bias, values per load)
def _layer_norm_kernel(dtype: str, weight: bool, bias: bool, vec: int) -> Any:
    return cp.RawKernel(*layer_norm_source(dtype, weight, bias, vec))


@lru_cache(maxsize=32)  # every (dtype, safe, values per load)
def _softmax_kernel(dtype: str, safe: bool, vec: int) -> Any:
    return cp.RawKernel(*softmax_source(dtype, safe, vec))


@lru_cache(maxsize=16)  # every (dtype, values per load)
def _add_kernel(dtype: str, vec: int) -> Any:
    return cp.RawKernel(*add_source(dtype, vec))


def layer_norm(x: Any, weight: Any, bias: Any, d: int, eps: float) -> Any:
    """Layer norm of the rows of length ``d`` of C-contiguous ``x`` (d <= WARP_ROWS), one warp per row."""
    y = cp.empty(x.shape, x.dtype)
    rows = x.size // d if d else 0
    if rows:
        vec = width(x.dtype, x, y, length=d)
        kernel = _layer_norm_kernel(dtype_name(x.dtype), weight is not None, bias is not None, vec)
        blocks = min(-(-rows // (THREADS // 32)), _MOST_BLOCKS)
        kernel((blocks,), (THREADS,), (x, x if weight is None else weight, x if bias is None else bias, y, np.int64(rows),
                                        np.int32(d), scalar(x.dtype, eps)))
    return y


def softmax_rows(x: Any, d: int, scale: float, safe: bool) -> Any:
    """softmax(scale * x) over the rows of length ``d`` of C-contiguous ``x`` (d <= WARP_ROWS), one warp per row."""
    y = cp.empty(x.shape, x.dtype)
    rows = x.size // d if d else 0
    if rows:
        vec = width(x.dtype, x, y, length=d)
        blocks = min(-(-rows // (THREADS // 32)), _MOST_BLOCKS)
        _softmax_kernel(dtype_name(x.dtype), safe, vec)((blocks,), (THREADS,), (x, y, np.int64(rows), np.int32(d),
                                                                           scalar(x.dtype, scale), scalar(x.dtype, -np.inf)))
    return y


def add(a: Any, b: Any) -> Any:
    """a + b for C-contiguous arrays of one shape and dtype, as a new array."""
    y = cp.empty(a.shape, a.dtype)
    if a.size:
        vec = width(a.dtype, a, b, y, length=a.size)
        _add_kernel(dtype_name(a.dtype), vec)((stride_blocks(a.size // vec),), (THREADS,), (a, b, y, np.int64(a.size)))
    return y
