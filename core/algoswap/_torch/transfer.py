"""Tensors into a backend's memory space and results back: numpy views of contiguous CPU tensors, DLPack
views of tensors already in the backend's memory, copies otherwise; parameters' views made once.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from .._records import MemorySpace
from .tensors import array_to_tensor, device_tensor, resizable_array, tensor_to_array

Parameter = torch.nn.Parameter


def memory_of(tensor: torch.Tensor) -> str:
    """The memory-space name of a tensor's device: "host" for the CPU, else the device type."""
    return "host" if tensor.is_cpu else tensor.device.type


def first(inputs: Sequence[Optional[torch.Tensor]]) -> int:
    """The position of the first input present (a call's results go to its device)."""
    for position, tensor in enumerate(inputs):
        if tensor is not None:
            return position
    raise ValueError("a swapped call without any input tensor")


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of the tensor (a copy only when it is not a contiguous CPU tensor)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_cpu:
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor_to_array(tensor)


def from_host(array: np.ndarray, arrays: Sequence[Any], like: torch.Tensor) -> torch.Tensor:
    """A new tensor on ``like``'s device holding ``array`` (copied if it aliases an input)."""
    flags = array.flags
    if not flags.writeable or not flags.c_contiguous or (array.base is not None and _aliases(array, arrays)):
        array = np.ascontiguousarray(array).copy()
    tensor = array_to_tensor(array)
    return tensor if like.is_cpu else tensor.to(like.device)


# numpy's function itself, without the __array_function__ dispatch (a third of its cost): host arrays only here
_may_share_memory = getattr(np.may_share_memory, "_implementation", np.may_share_memory)


def _aliases(array: np.ndarray, arrays: Sequence[Any]) -> bool:
    for other in arrays:
        if other is not None and _may_share_memory(array, other):
            return True
    return False


# Backend views of parameters, made once: id(parameter) -> (weak reference, where its memory is, view).
# Only views that alias the parameter's memory are kept (a numpy view of a CPU tensor, a DLPack view
# of a device tensor), so in-place updates show through them; copies (uploads to another memory
# space) are never kept: ``p.data.copy_(...)`` changes a parameter without bumping its version.
_VIEWS: dict[int, tuple[Any, tuple[Any, ...], Any]] = {}


def where(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Where a tensor's memory is and how it is laid out: a view made of it is good while this is unchanged
    (the view holds the memory it was made of, so no other tensor starts at that address meanwhile; FSDP's
    storage freed and allocated again has another data pointer, or the same memory)."""
    return tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device


def aliasing_view(tensor: torch.Tensor, make: Callable[[torch.Tensor], Any]) -> Any:
    """``make(tensor)`` for a parameter, kept while the parameter's memory stays where it is."""
    if type(tensor) is not Parameter:
        return make(tensor.detach() if tensor.requires_grad else tensor)
    now = (*where(tensor), make)
    entry = _VIEWS.get(id(tensor))
    if entry is not None and entry[1] == now and entry[0]() is tensor:
        return entry[2]
    view = make(tensor.detach())  # the view holds the detached alias, never the parameter itself
    key = id(tensor)
    _VIEWS[key] = (weakref.ref(tensor, lambda _ref: _VIEWS.pop(key, None)), now, view)
    return view


def host_view(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor (kept for parameters, whose storage it leaves resizable for
    FSDP: ``aliasing_view`` drops it when their memory moves), else a copy."""
    if tensor.is_cpu and tensor.is_contiguous():
        if type(tensor) is Parameter:
            view: np.ndarray = aliasing_view(tensor, resizable_array)
            return view
        return tensor_to_array(tensor.detach() if tensor.requires_grad else tensor)  # bfloat16 too (ml_dtypes)
    return host_array(tensor)


def crosses_as_is(tensor: torch.Tensor, any_order: bool) -> bool:
    """Whether ``tensor`` goes to a device backend as it is laid out: C-contiguous, or channels-last where the
    implementation takes any memory order (``any_order``); other layouts cross as C-contiguous copies."""
    return tensor.is_contiguous() or any_order and tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)


def to_backend(tensor: torch.Tensor, space: MemorySpace, enter: Any, any_order: bool = False) -> Any:
    """The tensor in the backend's memory (``space``, whose DLPack import is ``enter``): through DLPack
    (zero-copy, kept for parameters) when it is already there, as it is laid out where ``crosses_as_is`` (a
    channels-last activation of a half-precision model crosses without two transposing copies), else as a
    C-contiguous copy; from anywhere else, uploaded from a host copy."""
    if enter is not None and memory_of(tensor) == space.name:
        if not crosses_as_is(tensor, any_order):
            tensor = tensor.contiguous()
        return aliasing_view(tensor, enter)
    return space.upload(host_array(tensor))


def to_torch(result: Any, space: MemorySpace, like: torch.Tensor) -> torch.Tensor:
    """A device result as a tensor sharing its memory where ``like`` is in the backend's memory, else
    downloaded to ``like``'s device."""
    if space.from_dlpack is not None and memory_of(like) == space.name:
        return device_tensor(result)
    return from_host(space.download(result), [], like)
