"""The mps memory space: MpsArray (a contiguous torch tensor on the mps device, seen with numpy's dtype, as
implementations and the registry's checks read it) and the moves in and out of it. Imports torch: loaded only
when an array moves or an implementation runs, never at discovery.

The device is torch's "mps". Only the tests here move it (``DEVICE_TYPE = "cpu"``): torch's CPU device then
stands in for it, so that the implementations run on Linux against the reference.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.utils.dlpack

DEVICE_TYPE = "mps"
_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64, torch.bool: np.bool_,
          torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64, torch.uint8: np.uint8}


def device() -> torch.device:
    return torch.device(DEVICE_TYPE)


class MpsArray:
    """An array of the mps memory space: ``tensor``, a contiguous torch tensor on the mps device, with the
    ``shape`` and numpy ``dtype`` the registry checks. ``as_torch()`` gives the tensor back (torch's DLPack
    export knows no Metal device), so that a swapped model's mps tensors cross both ways without a copy."""

    __slots__ = ("tensor", "shape", "dtype")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor.contiguous()
        self.shape = tuple(int(s) for s in tensor.shape)
        if tensor.dtype not in _NUMPY:
            raise TypeError(f"MpsArray: torch dtype {tensor.dtype} has no numpy dtype here")
        self.dtype = np.dtype(_NUMPY[tensor.dtype])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(self.tensor.numel())

    def reshape(self, shape: Sequence[int]) -> "MpsArray":
        return MpsArray(self.tensor.reshape(tuple(shape)))

    def as_torch(self) -> torch.Tensor:
        return self.tensor

    def __repr__(self) -> str:
        return f"MpsArray(shape={self.shape}, dtype={self.dtype.name}, device={self.tensor.device})"


def to_host(array: Any) -> np.ndarray:
    """A host copy of an MpsArray (a host array as it is)."""
    if isinstance(array, MpsArray):
        copied: np.ndarray = array.tensor.detach().to("cpu", copy=True).numpy()
        return copied
    return np.asarray(array)


def from_host(array: Any) -> MpsArray:
    """A host array copied to the device (an MpsArray as it is)."""
    if isinstance(array, MpsArray):
        return array
    host = np.ascontiguousarray(array)
    if not host.flags.writeable:  # a frozen weight: torch makes no tensor of read-only memory
        host = host.copy()
    return MpsArray(torch.from_numpy(host).to(device(), copy=True))


def from_torch(value: Any) -> MpsArray:
    """An mps tensor as an MpsArray, without a copy (a non-contiguous one is made contiguous first); any other
    DLPack-capable object through DLPack."""
    tensor = value if isinstance(value, torch.Tensor) else torch.utils.dlpack.from_dlpack(value)
    return MpsArray(tensor.detach())
