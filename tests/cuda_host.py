"""The CUDA backend's raw kernels run on the host, without a GPU: a kernel source (its ``_types`` prelude
included) compiled as host C++ with the CUDA built-ins it uses defined here (thread indices, atomics,
__half and __nv_bfloat16 with the casts to and from float that CUDA gives them, to nearest, ties to even),
every thread of the launch run in turn, and ``fake_cupy``, which puts NumPy and these kernels in CuPy's place inside algoswap_cuda so that
its own functions (and the conformance kit through them) run here.

Kernels that synchronise their threads (block reductions, warp shuffles) run one thread per block: their loops
then cover every element (a warp kernel takes min(32, blockDim.x) lanes: one). Host C++ computes float and double as a GPU does (IEEE, round to nearest; -O1 with
contraction off, so a*b+c is rounded twice where CUDA may fuse it: within a unit roundoff).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Iterator

import numpy as np

COMPILER = shutil.which("c++") or shutil.which("g++")

HARNESS = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
using namespace std;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n) alignas(n)
template <typename V> static inline V __shfl_xor_sync(unsigned, V v, int) { return v; }  // a warp of one lane: never called
struct Dim { long long x; };
static Dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
static inline void __syncthreads() {}
static inline int __syncthreads_or(int predicate) { return predicate; }  // one thread per block here
struct alignas(16) uint4 { unsigned int x, y, z, w; };
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
template <typename V> static inline V atomicAdd(V* p, V v) { V old = *p; *p = old + v; return old; }
static inline int atomicExch(int* p, int v) { int old = *p; *p = v; return old; }
extern "C" { unsigned char shared[1 << 20]; }

// __half and __nv_bfloat16 as CUDA has them for a kernel's casts: (float)h and (__half)f, to nearest, ties to even
static inline float half_bits_to_float(unsigned short h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}
static inline unsigned short float_to_half_bits(float f) {
    uint32_t x; memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);  // NaN
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up round to inf
    if (ax < 0x38800000u) {  // below 2**-14: a subnormal half (or 0), in units of 2**-24
        float a; memcpy(&a, &ax, sizeof a);
        return (unsigned short)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    }
    uint32_t bits = (ax >> 13) - ((127u - 15u) << 10), rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) ++bits;
    return (unsigned short)(sign | bits);
}
static inline float bfloat16_bits_to_float(unsigned short b) { uint32_t x = (uint32_t)b << 16; float f; memcpy(&f, &x, sizeof f); return f; }
static inline unsigned short float_to_bfloat16_bits(float f) {
    uint32_t x; memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
struct __half {
    unsigned short x;
    __half() = default;
    __half(float f) : x(float_to_half_bits(f)) {}
    operator float() const { return half_bits_to_float(x); }
};
struct __nv_bfloat16 {
    unsigned short x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(float_to_bfloat16_bits(f)) {}
    operator float() const { return bfloat16_bits_to_float(x); }
};
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "the arrays' element size");
template <typename H> static void to_float(const unsigned short* h, float* f, long n) {
    for (long i = 0; i < n; ++i) { H v; v.x = h[i]; f[i] = (float)v; }
}
template <typename H> static void from_float(const float* f, unsigned short* h, long n) { for (long i = 0; i < n; ++i) h[i] = ((H)f[i]).x; }
extern "C" void half_to_float(const unsigned short* h, float* f, long n) { to_float<__half>(h, f, n); }
extern "C" void float_to_half(const float* f, unsigned short* h, long n) { from_float<__half>(f, h, n); }
extern "C" void bfloat16_to_float(const unsigned short* h, float* f, long n) { to_float<__nv_bfloat16>(h, f, n); }
extern "C" void float_to_bfloat16(const float* f, unsigned short* h, long n) { from_float<__nv_bfloat16>(f, h, n); }
"""

_KERNEL = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')
_libraries: dict[str, ctypes.CDLL] = {}
_folder = Path(tempfile.mkdtemp(prefix="algoswap_cuda_host_"))
atexit.register(shutil.rmtree, _folder, True)


def compile_source(code: str) -> ctypes.CDLL:
    """``code`` (host C++ after the harness) as a loaded shared library, compiled once per text."""
    key = hashlib.sha1(code.encode()).hexdigest()[:20]
    if key not in _libraries:
        source, library = _folder / f"{key}.cpp", _folder / f"{key}.so"
        source.write_text(HARNESS + code)
        done = subprocess.run([str(COMPILER), "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(library), str(source)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise AssertionError(f"host C++ of a CUDA kernel does not compile:\n{done.stderr[:4000]}\n--- code ---\n{code}")
        _libraries[key] = ctypes.CDLL(str(library))
    return _libraries[key]


def _parameters(text: str) -> list[tuple[str, str]]:
    """(type, name) of each parameter of a kernel's signature."""
    out = []
    for parameter in text.split(","):
        parameter = " ".join(parameter.split())
        name = re.findall(r"\w+$", parameter)[0]
        out.append((parameter[: -len(name)].strip(), name))
    return out


def _host_source(source: str) -> str:
    """A kernel source as host C++: its headers dropped (the harness defines what it uses), and for each kernel
    ``<name>_host(grid, block, ...)`` running every thread of the launch in turn."""
    code = re.sub(r"#include <cuda_(fp16|bf16)\.h>\n", "", source)
    for name, parameters in _KERNEL.findall(code):
        names = ", ".join(n for _, n in _parameters(parameters))
        code += (f'\nextern "C" void {name}_host(long long host_grid, long long host_block, {parameters}) {{\n'
                 f"    gridDim.x = host_grid; blockDim.x = host_block;\n"
                 f"    for (long long host_b = 0; host_b < host_grid; ++host_b)\n"
                 f"        for (long long host_t = 0; host_t < host_block; ++host_t) {{\n"
                 f"            blockIdx.x = host_b; threadIdx.x = host_t; {name}({names});\n        }}\n}}\n")
    return code


_C_SCALARS = {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float, "double": ctypes.c_double}


class HostKernel:
    """A stand-in for ``cupy.RawKernel(source, name)``: called like it, it runs the kernel on the host."""

    def __init__(self, code: str, name: str, options: Any = (), **kwargs: Any) -> None:
        self.code, self.name = code, name
        self.library = compile_source(_host_source(code))
        typedefs = dict((alias, ctype) for ctype, alias in re.findall(r"typedef ([\w ]+) (S|T);", code))
        parameters = _parameters(dict(_KERNEL.findall(code))[name])
        self.scalars = [None if "*" in ctype else _C_SCALARS[typedefs.get(ctype, ctype)] for ctype, _ in parameters]
        self.synchronised = "__syncthreads" in code or "__shfl" in code  # run with one thread per block (one lane per warp)

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], shared_mem: int = 0) -> None:
        assert len(args) == len(self.scalars), (self.name, len(args), len(self.scalars))
        values: list[Any] = [ctypes.c_longlong(grid[0]), ctypes.c_longlong(1 if self.synchronised else block[0])]
        for arg, scalar in zip(args, self.scalars):
            if scalar is None:
                assert isinstance(arg, np.ndarray) and _dense(arg), (self.name, type(arg))  # as CuPy, the data pointer
                values.append(ctypes.c_void_p(arg.ctypes.data))
            else:
                values.append(scalar(arg.item() if hasattr(arg, "item") else arg))
        getattr(self.library, f"{self.name}_host")(*values)


def _dense(array: np.ndarray) -> bool:
    """Whether ``array`` fills its memory without gaps in some order of its axes (C-contiguous, channels-last...):
    a kernel given its data pointer indexes that memory itself."""
    expected = array.itemsize
    for size, stride in sorted(zip(array.shape, array.strides), key=lambda pair: pair[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def every_kernel_source(dtype: str) -> list[str]:
    """Every raw kernel source of algoswap_cuda for ``dtype``, each variant (batch norm: each weight, bias and
    activation; softmax: safe or not; each activation's forward and gradients; the NHWC kernels for one element
    and for 16 bytes per thread; the vectorised row kernels), as CuPy compiles them."""
    from algoswap_cuda import (_epilogue, _exact, _kernels, _order, _passes, _pool_kernels, _transpose, _types, _vectorised,
                               activation)

    sources = [_types.prelude(dtype) + code for code in (_kernels.CONV2D_DIRECT, _pool_kernels.MAXPOOL2D, _pool_kernels.AVGPOOL2D,
                                                         _pool_kernels.ADAPTIVE, _kernels.INTERPOLATE, _kernels.PADDING_NAN)]
    lanes = {"float16": 8, "bfloat16": 8, "float32": 4, "float64": 2}[dtype]  # 16 bytes of each
    sources += [_types.prelude(dtype) + _pool_kernels.nhwc_source(count) for count in (1, lanes)]
    sources += [_types.prelude(dtype) + _order.channel_source(op, first, count)[0] for op in _order.OPERATORS
                for first in (False, True) for count in (1, lanes)]
    sources.append(_types.prelude(dtype) + "typedef int I;\n" + _kernels.CSRMM)
    sources += [_exact.scan_source(dtype), _types.prelude(dtype) + _transpose.TRANSPOSE]
    sources += [_exact.direct_source(dtype, bias, residual, name)[0] for name in _epilogue.ACTIVATIONS
                for bias in (False, True) for residual in (False, True)]
    for weight in (False, True):
        for bias in (False, True):
            sources += [_passes.batchnorm_source(dtype, weight, bias, name)[0] for name in _epilogue.ACTIVATIONS]
            sources.append(_passes.layer_norm_source(dtype, weight, bias)[0])
            sources += [_vectorised.layer_norm_source(dtype, weight, bias, vec)[0] for vec in _widths(dtype)]
    sources += [_vectorised.add_source(dtype, vec)[0] for vec in _widths(dtype)]
    sources += [_passes.softmax_source(dtype, safe)[0] for safe in (False, True)]
    sources += [_vectorised.softmax_source(dtype, safe, vec)[0] for safe in (False, True) for vec in _widths(dtype)]
    for kind, table in (("forward", activation.FORWARD), ("backward", activation.BACKWARD), ("from_output", activation.FROM_OUTPUT)):
        sources += [activation.kernel_source(kind, name, dtype, vec)[0] for name in table for vec in _widths(dtype)]
    return sources


def _widths(dtype: str) -> tuple[int, int]:
    """The values per load the vectorised kernels are compiled for: one, and 16 bytes' worth."""
    import ml_dtypes

    return 1, 16 // np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).itemsize


def _fake_cupy() -> types.ModuleType:
    """A module answering for ``cupy``: NumPy's functions, raw kernels run on the host, device 0."""
    fake = types.ModuleType("cupy_on_the_host")
    fake.__getattr__ = lambda name: getattr(np, name)  # type: ignore[method-assign]
    fake.RawKernel = HostKernel  # type: ignore[attr-defined]
    fake.asnumpy = np.asarray  # type: ignore[attr-defined]
    fake.ascontiguousarray = lambda a, dtype=None: np.asarray(a, dtype=dtype, order="C")  # type: ignore[attr-defined]  # 0-d stays 0-d
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0))  # type: ignore[attr-defined]
    return fake


def _forget_kernels() -> None:
    """Empty every cache of algoswap_cuda that may hold a kernel or a device array (made here or on a GPU)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("algoswap_cuda"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()
        tables = getattr(module, "_tables", None)
        if tables is not None and hasattr(tables, "clear"):
            tables.clear()


def fake_cupy(monkeypatch: Any) -> Iterator[None]:
    """Inside, algoswap_cuda's modules (those imported so far) see NumPy and host kernels as ``cp``."""
    import cupy

    fake = _fake_cupy()
    _forget_kernels()
    for name, module in list(sys.modules.items()):
        if name.startswith("algoswap_cuda") and getattr(module, "cp", None) is cupy:
            monkeypatch.setattr(module, "cp", fake)
    try:
        yield
    finally:
        _forget_kernels()
