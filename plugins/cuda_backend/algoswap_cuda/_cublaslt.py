"""cuBLASLt through ctypes, on the libcublasLt that CuPy's cuBLAS loaded (as ``_cublas`` calls cuBLAS): ``linear``'s
product with the bias added in the GEMM's epilogue, one cublasLtMatmul instead of a GEMM and a bias kernel.

Per call geometry (dtype, M, N, K, epilogue, compute type) the descriptors and the heuristic's first algorithm
are made once and kept (cache kind ``cuda_lt_plans``), or why cuBLASLt has none (the caller then runs the GEMM
and its bias kernel). A call sets the bias pointer on its descriptor and launches on CuPy's current stream, its
workspace from CuPy's pool: nothing is read back and nothing is allocated outside the pool, so CUDA graphs
record it. The heuristic assumes operands aligned to 256 bytes (cuBLASLt's default; CuPy's pool gives 512) and
a bias aligned to 16: a call copies an operand that is not.

The enum values are cublasLt.h's (cuBLAS 13.1; unchanged since CUDA 11). cuBLASLt's GELU epilogues compute the
tanh approximation (torch's own test of ``_addmm_activation(use_gelu=True)`` on CUDA compares with
``gelu(approximate="tanh")``), so only a tanh gelu may be fused into one; torch's default, erf gelu, may not.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from algoswap import LRUCache, declare_cache

from . import _blas, _cublas
from ._runtime import dtype_name

# cublasLtMatmulDescAttributes_t
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
# cublasLtEpilogue_t by what follows the product: the bias, then relu or the tanh gelu
EPILOGUES = {"bias": 4, "bias_relu": 6, "bias_gelu_tanh": 36}
# cublasLtMatmulPreferenceAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1
WORKSPACE_LIMIT = 32 << 20  # bytes an algorithm may ask for (cuBLAS's own default workspace on Hopper)
OPERAND_ALIGN, BIAS_ALIGN = 256, 16
_SCALE_32F = 0  # cudaDataType_t CUDA_R_32F: alpha and beta for float32 and the half precisions
DTYPES = ("float16", "bfloat16", "float32")

_POINTER, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_state: dict[str, Any] = {}
_lock = threading.Lock()


class _Heuristic(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


@dataclass
class Plan:
    """Descriptors and algorithm of one geometry: y (M, N) = x (M, K) @ w (N, K).T, then the epilogue."""

    desc: int
    layouts: tuple[int, int, int]  # w, x, y
    algo: _Heuristic
    epilogue: str

    @property
    def label(self) -> str:
        what = self.epilogue.replace("_", " + ").replace("gelu + tanh", "gelu (tanh)")
        return f"cuBLASLt matmul with {what} in its epilogue (cublasLtMatmul, heuristic algorithm, workspace {self.algo.workspace} B)"


PLANS = declare_cache("cuda_lt_plans", 512, "CUDA: cuBLASLt descriptors and heuristic algorithm (or why none), per product geometry")
_plans: LRUCache[Plan | str] = LRUCache(PLANS)


def plan(dtype: str, m: int, n: int, k: int, epilogue: str = "bias") -> Plan | str:
    """The plan of y (M, N) = x (M, K) @ w (N, K).T + bias for ``dtype``, or why cuBLASLt has none."""
    key = (dtype, m, n, k, epilogue, _blas.compute_type(dtype))
    found: Plan | str | None = _plans.get(key)
    if found is None:
        with _lock:
            try:
                found = _build(dtype, m, n, k, epilogue, key[-1])
            except Exception as exc:  # noqa: BLE001 - a missing library or a refusal is the reason
                found = f"{type(exc).__name__}: {exc}"[:300]
            _plans.put(key, found)
    return found


def linear(x: Any, w: Any, bias: Any, epilogue: str = "bias") -> Any | None:
    """x (M, K) @ w (N, K).T + bias (N) and the epilogue's activation as a new (M, N) array, both operands
    C-contiguous of one dtype of DTYPES, M, N, K > 0; None where cuBLASLt has no algorithm for it."""
    found = plan(dtype_name(x.dtype), x.shape[0], w.shape[0], x.shape[1], epilogue)
    if isinstance(found, str):
        return None
    x, w = (a if a.data.ptr % OPERAND_ALIGN == 0 else a.copy() for a in (x, w))
    bias = bias if bias.data.ptr % BIAS_ALIGN == 0 and bias.flags.c_contiguous else bias.copy()
    y = cp.empty((x.shape[0], w.shape[0]), x.dtype)
    workspace = cp.empty(found.algo.workspace, cp.uint8) if found.algo.workspace else None
    one, zero = _SCALARS
    library = _library()
    with _lock:  # the descriptor is shared by every call of this geometry: its bias pointer is set per call
        _set(library.cublasLtMatmulDescSetAttribute, found.desc, DESC_BIAS_POINTER, ctypes.c_void_p(bias.data.ptr))
        status = library.cublasLtMatmul(_handle(), found.desc, one.ctypes.data, w.data.ptr, found.layouts[0], x.data.ptr,
                                        found.layouts[1], zero.ctypes.data, y.data.ptr, found.layouts[2], y.data.ptr,
                                        found.layouts[2], ctypes.byref(found.algo.algo),
                                        0 if workspace is None else workspace.data.ptr, found.algo.workspace,
                                        cp.cuda.get_current_stream().ptr)
    _check(status, "cublasLtMatmul")
    return y


_SCALARS = (np.ones(1, np.float32), np.zeros(1, np.float32))  # alpha, beta in host memory (CUDA_R_32F)


def _build(dtype: str, m: int, n: int, k: int, epilogue: str, compute: int) -> Plan | str:
    """Descriptors for the row-major product as cuBLAS sees it, column-major: y.T (N, M) = op(w) (N, K) x.T (K, M),
    w read transposed; then the heuristic's first algorithm."""
    if dtype not in DTYPES:
        return f"{dtype} (taken: {', '.join(DTYPES)})"
    library, kind = _library(), _blas.DATA_TYPES[dtype]
    desc = _made(library.cublasLtMatmulDescCreate, compute, _SCALE_32F)
    _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSA, ctypes.c_int32(_cublas.OP_T))
    _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSB, ctypes.c_int32(_cublas.OP_N))
    _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE, ctypes.c_uint32(EPILOGUES[epilogue]))
    _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_BIAS_POINTER, ctypes.c_void_p(BIAS_ALIGN))  # alignment only
    layouts = tuple(_made(library.cublasLtMatrixLayoutCreate, kind, ctypes.c_uint64(rows), ctypes.c_uint64(cols),
                          ctypes.c_int64(rows)) for rows, cols in ((k, n), (k, m), (n, m)))
    preference = _made(library.cublasLtMatmulPreferenceCreate)
    try:
        _set(library.cublasLtMatmulPreferenceSetAttribute, preference, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(WORKSPACE_LIMIT))
        found, count = _Heuristic(), ctypes.c_int(0)
        status = library.cublasLtMatmulAlgoGetHeuristic(_handle(), desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                                        preference, 1, ctypes.byref(found), ctypes.byref(count))
    finally:
        library.cublasLtMatmulPreferenceDestroy(preference)
    result = Plan(desc, layouts, found, epilogue)  # type: ignore[arg-type]
    weakref.finalize(result, _destroy, library, desc, layouts)
    if status or count.value < 1 or found.state:
        return f"cuBLASLt's heuristic offers no algorithm (status {status}, {count.value} found)"
    return result


def _destroy(library: Any, desc: int, layouts: tuple[int, ...]) -> None:
    library.cublasLtMatmulDescDestroy(desc)
    for layout in layouts:
        library.cublasLtMatrixLayoutDestroy(layout)


def _made(create: Any, *args: Any) -> int:
    """A descriptor made by ``create(&out, *args)``."""
    out = ctypes.c_void_p()
    _check(create(ctypes.byref(out), *args), create.__name__)
    return int(out.value or 0)


def _set(setter: Any, target: int, attribute: int, value: Any) -> None:
    _check(setter(target, attribute, ctypes.byref(value), ctypes.sizeof(value)), f"{setter.__name__}({attribute})")


def _check(status: int, name: str) -> None:
    if status != 0:
        raise RuntimeError(f"{name} failed: cuBLAS status {status}")


def _handle() -> int:
    """The cuBLASLt handle of the current device (made once per device)."""
    device = cp.cuda.runtime.getDevice()
    handle = _state.get(device)
    if handle is None:
        handle = _state[device] = _made(_library().cublasLtCreate)
    return int(handle)


def _library() -> Any:
    """libcublasLt as CuPy's cuBLAS loaded it (found in the process's memory map; else by its usual names)."""
    library = _state.get("library")
    if library is None:
        _cublas._library()  # loads libcublas, which loads libcublasLt
        path = _cublas._loaded_path("/libcublasLt.so") or next(_loadable(("libcublasLt.so.13", "libcublasLt.so.12")), "")
        if not path:
            raise OSError("libcublasLt is not loaded and none of its usual names loads")
        library = _state["library"] = _declared(ctypes.CDLL(path))
    return library


def _loadable(names: tuple[str, ...]) -> Any:
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        yield name


def _declared(library: Any) -> Any:
    p, i, s = _POINTER, _INT, _SIZE
    signatures = {
        "cublasLtCreate": [p], "cublasLtMatmulDescCreate": [p, i, i], "cublasLtMatmulDescDestroy": [p],
        "cublasLtMatmulDescSetAttribute": [p, i, p, s], "cublasLtMatrixLayoutCreate": [p, i, ctypes.c_uint64, ctypes.c_uint64,
                                                                                      ctypes.c_int64],
        "cublasLtMatrixLayoutDestroy": [p], "cublasLtMatmulPreferenceCreate": [p], "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulPreferenceSetAttribute": [p, i, p, s], "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, i, p, p],
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, s, p],
    }
    for name, arguments in signatures.items():
        function = getattr(library, name)
        function.argtypes, function.restype = arguments, i
    return library
