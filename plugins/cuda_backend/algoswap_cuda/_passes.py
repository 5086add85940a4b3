"""Single-launch kernels for the steps that composed CuPy expressions made host-bound: inference batch
norm (eight CuPy launches, 111 µs of host time per call on the H200), layer norm (ten, 197 µs), a
many-input concatenation (one copy per input, 103 µs for DenseNet's) and the softmax over the last axis
(attention's, 604 µs with its masking). Each is one ``cp.RawKernel``
launch (a few µs on the host), compiled by NVRTC on first use and kept per element type and variant.

Every float dtype: float16 and bfloat16 arrays are read and written as they are, and everything between
(statistics, sums, the activation) is computed in float32 (``_types.prelude``: S stored, T computed), rounded once.

The arithmetic is PyTorch's: batch norm as ``x * scale + shift`` with ``scale = weight / sqrt(var +
eps)`` and ``shift = bias - mean * scale``; layer norm two-pass over each row, ``(x - mean) * rstd``
then the weight and the bias; softmax as ``exp(x - max) / sum`` over each row (a NaN spreads over its
row; attention's rows of -inf give zeros, as torch's ``_safe_softmax``); so NaN and inf spread as they
do there.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import cupy as cp
import numpy as np

from . import _vectorised
from ._epilogue import ACTIVATIONS
from ._types import accumulation, prelude, scalar
from ._runtime import dtype_name

_COPY_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}  # by item size
_THREADS, _MOST_BLOCKS = 256, 8192
MOST_INPUTS = 64  # concatenations of more inputs run as CuPy's (one copy per input)

_BATCHNORM = """extern "C" __global__ void {name}(const S* x, const S* mean, const S* var, const S* w, const S* b, S* y,
                                  long long n, long long plane, int channels, T eps) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {{
        const int c = (i / plane) % channels;
        T scale = (T)1 / sqrt((T)var[c] + eps);
        {weight}
        const T shift = {bias} - (T)mean[c] * scale;
        T v = (T)x[i] * scale + shift;
        {activation}
        y[i] = (S)v;
    }}
}}
"""

_LAYER_NORM = """__device__ T block_sum(T v, T* part) {{
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }}
    const T total = part[0];
    __syncthreads();
    return total;
}}
extern "C" __global__ void {name}(const S* x, const S* w, const S* b, S* y, long long rows, int d, T eps) {{
    extern __shared__ unsigned char shared[];
    T* part = (T*)shared;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{
        const S* in = x + row * d;
        S* out = y + row * d;
        T s = 0;
        for (int j = threadIdx.x; j < d; j += blockDim.x) s += (T)in[j];
        const T mean = block_sum(s, part) / d;
        T q = 0;
        for (int j = threadIdx.x; j < d; j += blockDim.x) {{ const T c = (T)in[j] - mean; q += c * c; }}
        const T rstd = (T)1 / sqrt(block_sum(q, part) / d + eps);
        for (int j = threadIdx.x; j < d; j += blockDim.x) {{
            T v = ((T)in[j] - mean) * rstd;
            {weight}
            {bias}
            out[j] = (S)v;
        }}
    }}
}}
"""


_SOFTMAX = """// products rounded on their own, never contracted into the subtraction after them: inf - inf stays NaN
__device__ inline float mul_rn(float a, float b) {{ return __fmul_rn(a, b); }}
__device__ inline double mul_rn(double a, double b) {{ return __dmul_rn(a, b); }}
__device__ T block_reduce(T v, T* part, bool maximum) {{
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) {{
            const T other = part[threadIdx.x + s];
            part[threadIdx.x] = maximum ? ((other > part[threadIdx.x] || other != other) ? other : part[threadIdx.x])
                                        : part[threadIdx.x] + other;
        }}
        __syncthreads();
    }}
    const T total = part[0];
    __syncthreads();
    return total;
}}
extern "C" __global__ void {name}(const S* x, S* y, long long rows, int d, T scale, T lowest) {{
    extern __shared__ unsigned char shared[];
    T* part = (T*)shared;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{
        const S* in = x + row * d;
        S* out = y + row * d;
        T m = lowest;
        for (int j = threadIdx.x; j < d; j += blockDim.x) {{ const T v = mul_rn((T)in[j], scale); if (v > m || v != v) m = v; }}
        m = block_reduce(m, part, true);
        if ({safe} && m == lowest) {{  // every score -inf: no key is seen
            for (int j = threadIdx.x; j < d; j += blockDim.x) out[j] = (S)(T)0;
            continue;
        }}
        T s = 0;
        for (int j = threadIdx.x; j < d; j += blockDim.x) s += exp(mul_rn((T)in[j], scale) - m);
        s = block_reduce(s, part, false);
        for (int j = threadIdx.x; j < d; j += blockDim.x) out[j] = (S)(exp(mul_rn((T)in[j], scale) - m) / s);
    }}
}}
"""


def batchnorm_source(dtype: str, weight: bool, bias: bool, activation: str) -> tuple[str, str]:
    """The CUDA source of the batch norm kernel for this (dtype, weight, bias, activation), and its name."""
    name = f"algoswap_batchnorm_{dtype}{'_w' * weight}{'_b' * bias}_{activation}"
    source = prelude(dtype) + _BATCHNORM.format(name=name, weight="scale *= (T)w[c];" if weight else "",
                                                bias="(T)b[c]" if bias else "(T)0", activation=ACTIVATIONS[activation])
    return source, name


@lru_cache(maxsize=256)  # every (dtype, weight, bias, activation)
def _batchnorm_kernel(dtype: str, weight: bool, bias: bool, activation: str) -> Any:
    return cp.RawKernel(*batchnorm_source(dtype, weight, bias, activation))


@lru_cache(maxsize=16)  # every (dtype, weight, bias)
def _layer_norm_kernel(dtype: str, weight: bool, bias: bool) -> Any:
    return cp.RawKernel(*layer_norm_source(dtype, weight, bias))


def layer_norm_source(dtype: str, weight: bool, bias: bool) -> tuple[str, str]:
    """The CUDA source of the block-per-row layer norm kernel (rows longer than ``_vectorised.WARP_ROWS``) for this
    (dtype, weight, bias), and its name."""
    name = f"algoswap_layer_norm_{dtype}{'_w' * weight}{'_b' * bias}"
    return prelude(dtype) + _LAYER_NORM.format(name=name, weight="v = v * (T)w[j];" if weight else "",
                                               bias="v = v + (T)b[j];" if bias else ""), name


@lru_cache(maxsize=8)
def _softmax_kernel(dtype: str, safe: bool) -> Any:
    return cp.RawKernel(*softmax_source(dtype, safe))


def softmax_source(dtype: str, safe: bool) -> tuple[str, str]:
    """The CUDA source of the block-per-row softmax kernel (rows longer than ``_vectorised.WARP_ROWS``) for this
    (dtype, safe), and its name."""
    name = f"algoswap_softmax_{dtype}{'_safe' * safe}"
    return prelude(dtype) + _SOFTMAX.format(name=name, safe="true" if safe else "false"), name


def _contiguous(a: Any) -> Any:
    return a if a is None or a.flags.c_contiguous else cp.ascontiguousarray(a)


def _blocks(count: int) -> int:
    return max(1, min(-(-count // _THREADS), _MOST_BLOCKS))


def batchnorm(x: Any, mean: Any, var: Any, weight: Any, bias: Any, eps: float, activation: str = "none") -> Any:
    """activation(batch norm of x (N, C, H, W) with running statistics), as a new C-contiguous array."""
    x, mean, var, weight, bias = (_contiguous(a) for a in (x, mean, var, weight, bias))
    y = cp.empty(x.shape, x.dtype)
    if x.size:
        kernel = _batchnorm_kernel(dtype_name(x.dtype), weight is not None, bias is not None, activation)
        kernel((_blocks(x.size),), (_THREADS,), (x, mean, var, x if weight is None else weight, x if bias is None else bias, y,
                                                  np.int64(x.size), np.int64(x.shape[2] * x.shape[3]), np.int32(x.shape[1]),
                                                  scalar(x.dtype, eps)))
    return y


def _row_threads(d: int) -> int:
    """Threads per row: a power of two (for the tree reductions), 32 to 256."""
    return min(_THREADS, max(32, 1 << (d - 1).bit_length()))


def softmax_rows(x: Any, scale: float = 1.0, safe: bool = False) -> Any:
    """softmax(scale * x) over the last axis: one warp per row up to ``_vectorised.WARP_ROWS`` values, one block of
    threads per longer row; with ``safe``, rows whose scores are all -inf give zeros (attention's rule) instead of NaN."""
    x = _contiguous(x)
    d = x.shape[-1] if x.ndim else 1
    if d <= _vectorised.WARP_ROWS:
        return _vectorised.softmax_rows(x, d, scale, safe)
    y = cp.empty(x.shape, x.dtype)
    rows = x.size // d if d else 0
    if rows:
        threads = _row_threads(d)
        _softmax_kernel(dtype_name(x.dtype), safe)((min(rows, _MOST_BLOCKS * 8),), (threads,),
                                            (x, y, np.int64(rows), np.int32(d), scalar(x.dtype, scale), scalar(x.dtype, -np.inf)),
                                            shared_mem=threads * accumulation(x.dtype).itemsize)
    return y


def layer_norm(x: Any, weight: Any, bias: Any, normalized_ndim: int, eps: float) -> Any:
    """Layer norm over the last ``normalized_ndim`` dimensions: one warp per row up to ``_vectorised.WARP_ROWS``
    values (``_vectorised.layer_norm``), one block of threads per row for longer ones."""
    x, weight, bias = (_contiguous(a) for a in (x, weight, bias))
    d = int(np.prod(x.shape[x.ndim - normalized_ndim:], dtype=np.int64))
    if d <= _vectorised.WARP_ROWS:
        return _vectorised.layer_norm(x, weight, bias, d, eps)
    y = cp.empty(x.shape, x.dtype)
    rows = x.size // d if d else 0
    if rows:
        threads = _row_threads(d)
        kernel = _layer_norm_kernel(dtype_name(x.dtype), weight is not None, bias is not None)
        kernel((min(rows, _MOST_BLOCKS * 8),), (threads,), (x, x if weight is None else weight, x if bias is None else bias,
                                                             y, np.int64(rows), np.int32(d), scalar(x.dtype, eps)),
               shared_mem=threads * accumulation(x.dtype).itemsize)
    return y


@lru_cache(maxsize=128)  # every (item size, number of inputs)
def _concat_kernel(itemsize: int, inputs: int) -> Any:
    name = f"algoswap_concat_{itemsize}_{inputs}"
    params = ", ".join(f"const T* in{k}, long long w{k}" for k in range(inputs))
    picks = "\n".join(f"        if (col < w{k}) {{ y[i] = in{k}[row * w{k} + col]; continue; }} col -= w{k};" for k in range(inputs))
    source = f"""typedef {_COPY_TYPES[itemsize]} T;
extern "C" __global__ void {name}(T* y, long long n, long long width, {params}) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {{
        const long long row = i / width;
        long long col = i % width;
{picks}
    }}
}}
"""
    return cp.RawKernel(source, name)


def concat(inputs: Sequence[Any], axis: int) -> Any:
    """The inputs joined along ``axis`` in one launch (CuPy's concatenate where the kernel does not apply)."""
    first = inputs[0]
    axis %= first.ndim
    if len(inputs) > MOST_INPUTS or first.dtype.itemsize not in _COPY_TYPES or any(a.dtype != first.dtype for a in inputs):
        return cp.concatenate(inputs, axis=axis)
    inputs = [_contiguous(a) for a in inputs]
    inner = int(np.prod(first.shape[axis + 1:], dtype=np.int64))
    widths = [a.shape[axis] * inner for a in inputs]
    shape = first.shape[:axis] + (sum(a.shape[axis] for a in inputs),) + first.shape[axis + 1:]
    y = cp.empty(shape, first.dtype)
    if y.size:
        args: list[Any] = [y, np.int64(y.size), np.int64(sum(widths))]
        for a, width in zip(inputs, widths):
            args += [a, np.int64(width)]
        _concat_kernel(first.dtype.itemsize, len(inputs))((_blocks(y.size),), (_THREADS,), tuple(args))
    return y
