"""Tensors and arrays: torch's dtypes by name, numpy views of CPU tensors and back (bfloat16 through int16
views), device arrays as tensors, and torch functions stored by import path."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.dlpack

from .._runner import bfloat16


TORCH_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}

# The dtypes torch.from_numpy takes as they are (a set look-up: ``dtype.name`` costs about 3 us)
_NATIVE = frozenset(np.dtype(name) for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                                "uint8", "bool", "complex64", "complex128"))


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a CPU tensor sharing its memory (bfloat16 through an int16 view)."""
    if array.dtype not in _NATIVE and array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def tensor_to_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array sharing its memory (bfloat16 through an int16 view)."""
    if tensor.dtype is torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bfloat16())
    array: np.ndarray = tensor.numpy()
    return array


_KDL_CUDA = 2  # DLPack's device type of CUDA memory
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA builds of torch only


def device_tensor(value: Any) -> torch.Tensor:
    """A backend's device array as a torch tensor sharing its memory: the tensor it wraps where it has
    ``as_torch()`` (the mps space's arrays: torch's DLPack export knows no Metal device), else through DLPack.
    CUDA arrays are imported as ``torch.utils.dlpack.from_dlpack`` imports them (the producer makes the data
    ready on torch's current stream, 1 naming the legacy default stream) without its Python-level stream and
    device objects (about 20 us a call on a slow host)."""
    as_torch = getattr(value, "as_torch", None)
    if as_torch is not None:
        tensor: torch.Tensor = as_torch()
        return tensor
    raw_stream = _raw_stream if torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]
    if raw_stream is not None and hasattr(value, "__dlpack_device__"):  # (a DLPack capsule has none: torch's function takes it)
        kind, index = value.__dlpack_device__()
        if kind == _KDL_CUDA:
            stream = raw_stream(index)
            imported: torch.Tensor = torch._C._from_dlpack(value.__dlpack__(stream=stream or 1))
            return imported
    return torch.utils.dlpack.from_dlpack(value)


def resizable_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array sharing its memory, through DLPack: unlike ``tensor.numpy()`` this
    leaves its storage resizable, which FSDP needs of parameters (it frees their unsharded storage after
    each use). The array dangles once that happens: keep it only while the tensor's ``data_ptr`` is its own."""
    if tensor.dtype == torch.bfloat16:
        return np.from_dlpack(tensor.view(torch.int16)).view(bfloat16())
    array: np.ndarray = np.from_dlpack(tensor)
    return array


@dataclass(frozen=True)
class NamedFunction:
    """A torch function of a fallback node stored by its import path (some, like F.max_pool2d, do not pickle)."""

    path: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function()(*args, **kwargs)

    def function(self) -> Any:
        if self.path.startswith("torch.ops."):  # an ATen op of torch.export's graph: torch.ops.aten.cumsum.default
            found: Any = torch.ops
            for part in self.path.split(".")[2:]:
                found = getattr(found, part)
            return found
        module, _, name = self.path.rpartition(".")
        return getattr(importlib.import_module(module), name)
