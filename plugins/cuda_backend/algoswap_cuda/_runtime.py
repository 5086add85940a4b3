"""CuPy, the GPU, the memory space and the TF32 and benchmark switches. Imported by the op modules and the probe
only: discovery and registration import neither CuPy nor the cuDNN frontend."""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import cupy as cp
import numpy as np

from algoswap import LRUCache, benchmark_wish, declare_cache, is_frozen, tf32_wish

# The backend's own switches (None: not set, ALGOSWAP_CUDA_TF32 / ALGOSWAP_CUDA_BENCHMARK and then the caller decide)
_switches: dict[str, bool | None] = {"tf32": None, "benchmark": None}
BENCHMARK_VARIABLE = "ALGOSWAP_CUDA_BENCHMARK"
HALF = ("float16", "bfloat16")
# dtype -> (the C type a raw kernel stores it as, the C type it computes in: float32 for the half precisions)
C_TYPES = {"float16": ("__half", "float"), "bfloat16": ("__nv_bfloat16", "float"), "float32": ("float", "float"),
           "float64": ("double", "double")}
INCLUDES = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"


def probe() -> bool | str:
    """True if CuPy sees a CUDA GPU, else why not (never raises)."""
    try:
        if not cp.cuda.is_available():
            return "no CUDA GPU is visible (cupy.cuda.is_available() is False)"
        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - a missing driver is a reason, not a crash
        return f"CUDA does not start: {type(exc).__name__}: {exc}"
    return True


def set_tf32(enabled: bool | None) -> None:
    """Let float32 convolutions and matrix products use TF32 tensor cores (True), forbid it (False),
    or leave it to ALGOSWAP_CUDA_TF32 and then to the caller (None, the default)."""
    _switches["tf32"] = enabled


def set_benchmark(enabled: bool | None) -> None:
    """Let ``guess`` choose its cuDNN engine by timing, as ``find`` does (True), keep cuDNN's heuristic pick
    (False), or leave it to ALGOSWAP_CUDA_BENCHMARK and then to the caller (None, the default)."""
    _switches["benchmark"] = enabled


def _own(switch: str, variable: str) -> tuple[bool | None, str]:
    """The backend's own say on a switch and where it comes from: its set_ function's setting, else the
    environment variable ("1" or "0"), else (None, ""): the caller's wish decides."""
    setting = _switches[switch]
    if setting is not None:
        return setting, f"algoswap_cuda.set_{switch}({setting})"
    value = os.environ.get(variable)
    return (value == "1", f"{variable}={value}") if value in ("0", "1") else (None, "")


def tf32(kind: str = "conv") -> bool:
    """Whether float32 ``kind`` ("conv" or "matmul") may run in TF32 now, read at each call (plans are
    cached per setting): set_tf32's setting, else ALGOSWAP_CUDA_TF32 ("1" or "0"), else the caller's wish
    (a swapped torch model passes torch's own switches: ``algoswap.tf32_wish``), else no."""
    own, _ = _own("tf32", "ALGOSWAP_CUDA_TF32")
    return tf32_wish(kind) is True if own is None else own


def benchmark() -> str:
    """What makes ``guess`` choose its engine by timing now ("" if nothing does: cuDNN's heuristic pick), read
    at each call: set_benchmark's setting, else ALGOSWAP_CUDA_BENCHMARK ("1" or "0"), else the caller's wish
    (a swapped torch model passes ``torch.backends.cudnn.benchmark``: ``algoswap.benchmark_wish``), else no."""
    own, source = _own("benchmark", BENCHMARK_VARIABLE)
    if own is None:
        return "torch.backends.cudnn.benchmark" if benchmark_wish() is True else ""
    return source if own else ""


def to_host(array: Any) -> np.ndarray:
    host: np.ndarray = cp.asnumpy(array)
    return host


# Frozen host arrays (algoswap.is_frozen: swap_backend's weights) are uploaded once and kept while the host
# array lives; any other (a read-only view too: it sees writes to its base) is uploaded at every call.
UPLOADS = declare_cache("cuda_uploads", 512, "CUDA: GPU copies of frozen host arrays (weights), each kept while its host array lives")
_uploaded: LRUCache[tuple[weakref.ref[np.ndarray], Any]] = LRUCache(UPLOADS)


def _forget(key: int, ref: weakref.ref[np.ndarray]) -> None:
    entry = _uploaded.get(key)
    if entry is not None and entry[0] is ref:
        _uploaded.pop(key)


# id -> weak reference of the GPU copies of frozen arrays that are all finite (scanned once, on the host, at
# upload): kernels whose NaN repair only matters for a non-finite operand skip it for these.
_known_finite: dict[int, weakref.ref[Any]] = {}


def known_finite(device: Any) -> bool:
    """Whether ``device`` is the GPU copy of a frozen host array with no NaN or infinity."""
    ref = _known_finite.get(id(device))
    return ref is not None and ref() is device


# id -> weak reference of the GPU copies of frozen host arrays (never written: weights), whose derived forms
# (channels-last copies) may be kept while they live.
_frozen_copies: dict[int, weakref.ref[Any]] = {}


def _remember_frozen(device: Any) -> None:
    key = id(device)
    _frozen_copies[key] = weakref.ref(device, lambda ref: _frozen_copies.pop(key, None) if _frozen_copies.get(key) is ref else None)


def is_frozen_copy(device: Any) -> bool:
    """Whether ``device`` is the GPU copy of a frozen host array (so never written)."""
    ref = _frozen_copies.get(id(device))
    return ref is not None and ref() is device


def _remember_finite(array: np.ndarray, device: Any) -> None:
    if array.dtype.kind == "f" or dtype_name(array.dtype) == "bfloat16":
        if not np.isfinite(array).all():
            return
    key = id(device)
    _known_finite[key] = weakref.ref(device, lambda ref: _known_finite.pop(key, None) if _known_finite.get(key) is ref else None)


def from_host(array: Any) -> Any:
    """A host array on the GPU; frozen numpy arrays are uploaded once and the copy reused; a
    scipy.sparse CSR matrix becomes a cupyx.scipy.sparse one."""
    if isinstance(array, cp.ndarray):
        return cp.ascontiguousarray(array)
    if type(array).__module__.startswith("scipy.sparse"):
        import cupyx.scipy.sparse

        return cupyx.scipy.sparse.csr_matrix(array)
    if is_frozen(array):
        entry = _uploaded.get(id(array))
        if entry is not None and entry[0]() is array:
            return entry[1]
        device = cp.asarray(np.ascontiguousarray(array).reshape(array.shape))  # a 0-d array stays 0-d
        _remember_finite(array, device)
        _remember_frozen(device)
        key = id(array)

        def forget(ref: weakref.ref[np.ndarray]) -> None:
            _forget(key, ref)

        _uploaded.put(key, (weakref.ref(array, forget), device))
        return device
    return cp.asarray(np.ascontiguousarray(array).reshape(array.shape))  # a broadcast view (strides of 0) made whole on the host first


def uploads_cached() -> int:
    """How many frozen host arrays have a cached copy on the GPU."""
    return len(_uploaded)


_TORCH_DTYPES = {"torch.float32": np.dtype(np.float32), "torch.float64": np.dtype(np.float64), "torch.float16": np.dtype(np.float16)}


def _bfloat16() -> None:
    import ml_dtypes  # CuPy 14 takes ml_dtypes' bfloat16 as an array dtype

    _TORCH_DTYPES["torch.bfloat16"] = np.dtype(ml_dtypes.bfloat16)


try:
    _bfloat16()
except ImportError:  # bfloat16 tensors then cross through DLPack (which refuses them without ml_dtypes)
    pass


_DTYPE_NAMES: dict[Any, str] = {}  # numpy's dtype.name is computed in Python at each access (~3 us for float32)


def dtype_name(dtype: Any) -> str:
    """``dtype.name``, remembered per dtype (a handful exist)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def from_dlpack(tensor: Any) -> Any:
    """A CuPy view of a CUDA tensor (zero-copy). A C-contiguous or channels-last torch tensor is viewed through
    its data pointer and strides (the view keeps the tensor alive): torch's ``__dlpack__`` queries streams and
    devices on every call (~40 us), and both libraries run on the null stream here."""
    dtype = _numpy_dtype(getattr(tensor, "dtype", None))
    device = cp.cuda.runtime.getDevice()
    if dtype is None or not tensor.is_cuda or tensor.get_device() != device:
        return cp.from_dlpack(tensor)
    strides = None
    size = dtype.itemsize
    if not tensor.is_contiguous():
        if tensor.dim() != 4 or not tensor.is_contiguous(memory_format=sys.modules["torch"].channels_last):
            return cp.from_dlpack(tensor)
        strides = tuple(s * size for s in tensor.stride())
    # the device named: else CuPy asks the driver for the pointer's device at each call
    memory = cp.cuda.UnownedMemory(tensor.data_ptr(), tensor.numel() * size, tensor, device)
    return cp.ndarray(tuple(tensor.shape), dtype, cp.cuda.MemoryPointer(memory, 0), strides=strides)


_BY_TORCH_DTYPE: dict[Any, Any] = {}


def _numpy_dtype(torch_dtype: Any) -> Any:
    """The numpy dtype of a torch dtype that crosses as a CuPy view (None for the others), remembered per dtype."""
    dtype = _BY_TORCH_DTYPE.get(torch_dtype)
    if dtype is None:
        dtype = _TORCH_DTYPES.get(str(torch_dtype))
        if dtype is not None:
            _BY_TORCH_DTYPE[torch_dtype] = dtype
    return dtype


def address(array: Any) -> int:
    """The address of ``array``'s first element (a CuPy array's; a NumPy array's where tests run kernels on the host)."""
    return int(array.ctypes.data) if isinstance(array, np.ndarray) else int(array.data.ptr)


def contiguous(array: Any) -> Any:
    """``array`` C-contiguous (itself if it is; a channels-last float array through the tiled transpose)."""
    if array.flags.c_contiguous:
        return array
    from . import _transpose

    if _transpose.handles(array) and array.transpose(0, 2, 3, 1).flags.c_contiguous:
        return _transpose.to_contiguous(array)
    return cp.ascontiguousarray(array)


def channels_last(array: Any) -> Any:
    """A 4-D array (N, C, H, W) in NHWC memory order (itself if it is; a C-contiguous float array through the tiled
    transpose)."""
    if array.transpose(0, 2, 3, 1).flags.c_contiguous:
        return array
    from . import _transpose

    if _transpose.handles(array) and array.flags.c_contiguous:
        return _transpose.to_channels_last(array)
    return cp.ascontiguousarray(array.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def empty(shape: tuple[int, ...], dtype: Any, nhwc: bool) -> Any:
    """A new 4-D array of NCHW ``shape``, in NHWC memory order where ``nhwc``."""
    if not nhwc:
        return cp.empty(shape, dtype)
    n, c, h, w = shape
    return cp.empty((n, h, w, c), dtype).transpose(0, 3, 1, 2)


# The NHWC (KRSC) copies of weights that are GPU copies of frozen host arrays, kept while those live.
NHWC_WEIGHTS = declare_cache("cuda_nhwc_weights", 512, "CUDA: NHWC (KRSC) copies of frozen weights, for channels-last convolutions")
_nhwc_weights: LRUCache[tuple[weakref.ref[Any], Any]] = LRUCache(NHWC_WEIGHTS)


def channels_last_weight(weight: Any) -> Any:
    """A convolution weight (K, C, R, S) in KRSC memory order: made once for a frozen weight's GPU copy,
    at each call for any other (it may have been written since)."""
    if not is_frozen_copy(weight):
        return channels_last(weight)
    key = id(weight)
    entry = _nhwc_weights.get(key)
    if entry is not None and entry[0]() is weight:
        return entry[1]
    copy = channels_last(weight)
    _nhwc_weights.put(key, (weakref.ref(weight), copy))
    return copy
