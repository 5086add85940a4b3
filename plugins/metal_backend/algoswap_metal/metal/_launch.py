"""The runner: the kernel library compiled once per device, and kernel calls in torch.mps.compile_shader's calling
convention: ``library.NAME(*tensors, threads=..., group_size=...)``, each tensor bound as ``[[buffer(i)]]`` in
argument order, the parameter block (an int32 tensor, made once per geometry) last.

Why torch.mps.compile_shader and not pyobjc-framework-Metal: it needs nothing beyond torch, it binds mps tensors as
they are (pyobjc would need their MTLBuffers, which torch does not expose), and it encodes on torch's own command
stream, so that our kernels are ordered with MPSGraph's work on the same tensors without any synchronisation.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Sequence

import torch

from algoswap import LRUCache, declare_cache

from .. import _device
from .._device import MpsArray, device
from . import _params

# kernels/*.metal, compiled as one library in this order (common.metal defines what the others use)
SOURCES = ("common.metal", "conv.metal", "gemm.metal", "elementwise.metal", "pool.metal")
PARAMS = declare_cache("metal_params", 256, "Metal: the parameter block of each kernel call's geometry (an int32 tensor "
                                            "on the device)")
_params_cache: LRUCache[torch.Tensor] = LRUCache(PARAMS)
_libraries: dict[str, Any] = {}  # device type -> the compiled library
_dummies: dict[str, torch.Tensor] = {}  # device type -> a one-element tensor standing in for an absent buffer


def source() -> str:
    """Every kernel source, as one library."""
    folder = resources.files("algoswap_metal").joinpath("kernels")
    return "\n".join(folder.joinpath(name).read_text() for name in SOURCES)


def compile_library(text: str) -> Any:
    """The kernels compiled for the mps device (tests/metal_host.py puts a host compiler in its place)."""
    return torch.mps.compile_shader(text)


def library() -> Any:
    found = _libraries.get(_device.DEVICE_TYPE)
    if found is None:
        found = _libraries[_device.DEVICE_TYPE] = compile_library(source())
    return found


def forget() -> None:
    """Drop the compiled library and the cached tensors (after the device or the compiler changed)."""
    _libraries.clear()
    _dummies.clear()
    _params_cache.clear()


def params(struct: str, **fields: int) -> torch.Tensor:
    """``struct``'s parameter block on the device (_params.pack checks its fields)."""
    values = _params.pack(struct, fields)
    key = (_device.DEVICE_TYPE, struct, values)
    found = _params_cache.get(key)
    if found is None:
        found = _params_cache.put(key, torch.tensor(values, dtype=torch.int32).to(device()))
    return found


def dummy() -> torch.Tensor:
    """A buffer for an absent bias or residual (its kernel reads nothing of it)."""
    found = _dummies.get(_device.DEVICE_TYPE)
    if found is None:
        found = _dummies[_device.DEVICE_TYPE] = torch.zeros(1, dtype=torch.float32, device=device())
    return found


def tensor(array: MpsArray | None) -> torch.Tensor:
    """An input's tensor (an absent one: the dummy)."""
    return dummy() if array is None else array.tensor


def empty(shape: Sequence[int]) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=torch.float32, device=device())


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def run(kernel: str, *buffers: torch.Tensor, threads: Sequence[int], group: Sequence[int]) -> None:
    """One dispatch of ``kernel`` over ``threads`` (dispatchThreads: the last threadgroups may be partial)."""
    getattr(library(), kernel)(*buffers, threads=list(threads), group_size=list(group))


def supports_size(call: Any) -> bool | str:
    """Every array indexable with 32-bit ints (the kernels' indices)."""
    for shape in [*call.shapes, call.out_shape]:
        count = 1
        for size in shape or ():
            count *= size
        if count > _params.INT32_MAX:
            return f"arrays of more than {_params.INT32_MAX} elements (the kernels index with 32-bit ints)"
    return True
