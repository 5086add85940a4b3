"""The SYCL device through dpctl: device selection, programs built once per device and dtype, USM arrays.

Imported only when an implementation or the availability probe first runs: discovery and
registration never import dpctl. The OpenCL runtime from PyPI shows its CPU device only when
OCL_ICD_FILENAMES names its libintelocl.so; it is set here, if the user has not, before dpctl loads.
"""

from __future__ import annotations

import ctypes
import math
import functools
import os
import threading
import weakref
from dataclasses import dataclass, field
from importlib import metadata, resources
from typing import Any, Callable, Sequence

import numpy as np

from algoswap import LRUCache, declare_cache, is_frozen

from ._pool import HostWindow, Lease, Pool

ENV_DEVICE = "ALGOSWAP_SYCL_DEVICE"
_DTYPES = {"float32": "float", "float64": "double"}
SOURCES = ("matmul.cl", "layout.cl", "direct.cl", "pool.cl")  # kernels/*.cl, built as one program in this order
_chosen: str | None = None  # set by use_device(); wins over ALGOSWAP_SYCL_DEVICE
_contexts: dict[str, "Context"] = {}  # one per device name asked for (programs and kernels: one per dtype and name)
RESIDENT = declare_cache(
    "sycl_resident", 512,
    "SYCL: device copies of frozen host arrays (weights; transposed weights), per device, each kept while its "
    "host array lives")
_lock = threading.RLock()


def _find_libintelocl() -> str | None:
    """libintelocl.so of the intel-opencl-rt distribution, wherever pip put it."""
    try:
        dist = metadata.distribution("intel-opencl-rt")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "libintelocl.so":
            return str(dist.locate_file(file))
    return None


def import_dpctl() -> Any:
    """dpctl, imported after pointing the OpenCL loader at Intel's CPU runtime (unless the user chose)."""
    if "OCL_ICD_FILENAMES" not in os.environ:
        library = _find_libintelocl()
        if library:
            os.environ["OCL_ICD_FILENAMES"] = library
    import dpctl

    return dpctl


def use_device(name: str | None) -> None:
    """Run on the SYCL device named by a dpctl filter string ("opencl:cpu:0", "gpu", ...); None: back
    to ALGOSWAP_SYCL_DEVICE, else dpctl's default device. Takes effect at the next call."""
    global _chosen
    _chosen = name


def device_name() -> str:
    """The filter string asked for: use_device(), else ALGOSWAP_SYCL_DEVICE, else "default"."""
    return _chosen or os.environ.get(ENV_DEVICE) or "default"


def context() -> "Context":
    """The context of the selected device (made once per device name and cached)."""
    name = device_name()
    found = _contexts.get(name)
    if found is None:
        with _lock:
            found = _contexts.get(name)
            if found is None:
                found = _contexts[name] = Context.open(name)
    return found


def probe() -> bool | str:
    """True if dpctl loads and the selected SYCL device exists, else why not (never raises)."""
    try:
        import_dpctl()
    except Exception as exc:  # noqa: BLE001 - any failure is a reason, not a crash
        return f"dpctl does not import: {type(exc).__name__}: {exc} (pip install 'algoswap-sycl' brings dpctl and Intel's OpenCL runtime)"
    try:
        ctx = context()
    except Exception as exc:  # noqa: BLE001
        return f"no SYCL device {device_name()!r}: {type(exc).__name__}: {exc}"
    if ctx.backend != "opencl":
        return f"SYCL device {ctx.filter_string} is a {ctx.backend} device; these kernels are OpenCL C (an OpenCL device is needed)"
    return True


@dataclass
class SyclArray:
    """A C-contiguous array in the device's USM (shared) memory: the backend's device-resident value."""

    memory: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    context: "Context" = field(repr=False)
    lease: Lease | None = field(default=None, repr=False)  # outputs and uploads: see _pool.py

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def host_view(self) -> np.ndarray:
        """The USM memory seen as a numpy array, without copying (shared USM is host-accessible)."""
        if self.lease is not None:
            return np.asarray(HostWindow(self.lease, self.shape, self.dtype.str))
        return np.frombuffer(self.memory, dtype=self.dtype, count=self.size).reshape(self.shape)

    def reshape(self, shape: Sequence[int]) -> "SyclArray":
        return SyclArray(self.memory, tuple(int(s) for s in shape), self.dtype, self.context, self.lease)


@dataclass
class Context:
    """One device: its in-order queue, whether it has float64, and its programs (built on first use)."""

    queue: Any
    filter_string: str
    name: str
    backend: str
    fp64: bool
    local_panel: bool  # stage the matrix product's A panel in local memory (devices with on-chip local memory)
    programs: dict[str, Any] = field(default_factory=dict)
    kernels: dict[tuple[str, str], Any] = field(default_factory=dict)
    _resident: LRUCache[tuple[Any, SyclArray]] = field(default_factory=lambda: LRUCache(RESIDENT), repr=False)
    pool: Pool = field(default_factory=Pool, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @classmethod
    def open(cls, name: str) -> "Context":
        dpctl = import_dpctl()
        device = dpctl.SyclDevice() if name == "default" else dpctl.SyclDevice(name)
        queue = dpctl.SyclQueue(device, property="in_order")
        on_chip = bool(device.is_gpu or device.is_accelerator)
        return cls(queue, device.filter_string, device.name, device.backend.name, bool(device.has_aspect_fp64), on_chip)

    def describe(self) -> str:
        return f"{self.filter_string} ({self.name})"

    def kernel(self, dtype: np.dtype, name: str) -> Any:
        """The named kernel of this device's program for ``dtype`` (the program is built once)."""
        key = (dtype.name, name)
        found = self.kernels.get(key)
        if found is None:
            with _lock:
                program = self.programs.get(dtype.name)
                if program is None:
                    program = self.programs[dtype.name] = self._build(dtype)
                found = self.kernels[key] = program.get_sycl_kernel(name)
        return found

    def _build(self, dtype: np.dtype) -> Any:
        import dpctl.program

        folder = resources.files(__package__).joinpath("kernels")
        source = "\n".join(folder.joinpath(name).read_text() for name in SOURCES)
        if dtype.name == "float64":
            source = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + source
        return dpctl.program.create_program_from_source(self.queue, source, self._options(dtype))

    def _options(self, dtype: np.dtype) -> str:
        mask = "int16" if dtype.itemsize == 4 else "long16"  # select()'s lane mask for REAL16
        return f"-DREAL={_DTYPES[dtype.name]} -DMASK16={mask} -DLOCAL_PANEL={int(self.local_panel)} -cl-mad-enable"

    def empty(self, shape: Sequence[int], dtype: np.dtype, temporary: bool = False) -> SyclArray:
        """A new device array in memory from the pool (see _pool.py): a ``temporary`` one goes back at
        ``release()``; any other when it and every view of it are gone."""
        import dpctl.memory

        shape = tuple(int(s) for s in shape)
        nbytes = max(math.prod(shape), 1) * dtype.itemsize
        memory = self.pool.take(nbytes)
        if memory is None:
            memory = dpctl.memory.MemoryUSMShared(nbytes, queue=self.queue)
        if temporary:
            self._temporaries().append(memory)
            return SyclArray(memory, shape, dtype, self)
        return SyclArray(memory, shape, dtype, self, self.pool.lease(memory))

    def _temporaries(self) -> list[Any]:
        if not hasattr(self._local, "temporaries"):
            self._local.temporaries = []
        found: list[Any] = self._local.temporaries
        return found

    def release(self) -> None:
        """Give this thread's temporaries back to the pool (after ``wait()``: no kernel reads them)."""
        temporaries = self._temporaries()
        for memory in temporaries:
            self.pool.give(memory)
        temporaries.clear()

    def upload(self, array: np.ndarray, temporary: bool = False) -> SyclArray:
        """A device copy of a host array."""
        array = np.ascontiguousarray(array)
        out = self.empty(array.shape, array.dtype, temporary)
        if array.size:
            out.host_view()[...] = array
        return out

    def device(self, array: Any) -> SyclArray:
        """``array`` on this device: itself when it already is, else a copy. A frozen host array
        (``algoswap.is_frozen``: swap_backend's constant weights) is copied once and kept while it lives;
        any other (a read-only view too: it sees writes to its base) is copied at every call."""
        if isinstance(array, SyclArray):
            return array
        if not is_frozen(array):
            return self.upload(array, temporary=True)
        return self.resident(array, "plain", self.upload)

    def resident(self, array: np.ndarray, form: str, make: Callable[[np.ndarray], SyclArray]) -> SyclArray:
        """A device array made from frozen ``array`` by ``make``, cached while ``array`` lives (keyed by
        its id, checked through a weak reference: an id reused after garbage collection never matches;
        at most RESIDENT's size of them, least recently used dropped first)."""
        key = (id(array), form, array.shape, array.dtype.str)
        entry = self._resident.get(key)
        if entry is not None and entry[0]() is array:
            return entry[1]
        made = make(array)
        self._resident.put(key, (weakref.ref(array, functools.partial(self._drop, key)), made))
        return made

    def _drop(self, key: tuple[Any, ...], ref: Any) -> None:
        entry = self._resident.get(key)
        if entry is not None and entry[0] is ref:
            self._resident.pop(key)

    def run(self, dtype: np.dtype, name: str, args: Sequence[Any], global_range: Sequence[int],
            local_range: Sequence[int] | None = None) -> None:
        """Submit a kernel (asynchronously, in order); ints become cl int, floats REAL."""
        converted = [_argument(a, dtype) for a in args]
        self.queue.submit_async(self.kernel(dtype, name), converted, list(global_range),
                                None if local_range is None else list(local_range))

    def wait(self) -> None:
        self.queue.wait()
        self.release()


def _argument(value: Any, dtype: np.dtype) -> Any:
    if isinstance(value, SyclArray):
        return value.memory
    if isinstance(value, Long):
        return ctypes.c_longlong(int(value))
    if isinstance(value, (int, np.integer)):
        return ctypes.c_int(int(value))
    return value


class Long(int):
    """An int passed as an OpenCL long (64-bit offsets)."""


def to_host(array: Any) -> np.ndarray:
    """A host numpy array of a SyclArray, without copying: its USM memory seen from the host (on a CPU device
    a copy of a 25 MiB output took 4 ms, more than the convolution's oneDNN time). Safe because no kernel here
    writes into an existing array (every op makes new outputs), and the memory goes back to the pool only
    when the SyclArray and every host view of it are gone. A host array is returned as it is."""
    if isinstance(array, SyclArray):
        return array.host_view()
    return np.asarray(array)


def from_host(array: Any) -> SyclArray:
    """A host array copied into the selected device's USM memory (a SyclArray is returned as it is)."""
    return array if isinstance(array, SyclArray) else context().upload(array)


def resident_count() -> int:
    """How many device copies of frozen host arrays the selected device keeps."""
    return len(context()._resident)
