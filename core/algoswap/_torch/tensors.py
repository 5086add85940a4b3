"""Tensors and arrays: numpy views of CPU tensors and back (bfloat16 through int16 views), and
torch functions stored by import path."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._runner import bfloat16


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a CPU tensor sharing its memory (bfloat16 through an int16 view)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def tensor_to_array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array sharing its memory (bfloat16 through an int16 view)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bfloat16())
    array: np.ndarray = tensor.numpy()
    return array


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
        module, _, name = self.path.rpartition(".")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
