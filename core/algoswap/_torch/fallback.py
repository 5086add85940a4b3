"""The torch nodes of a Model: what no registry op serves (``fallback="torch"``), run by PyTorch on
the device where their inputs are.

Planning infers a node's output on meta tensors (no data, no time). Running hands the inputs to
torch without copies where torch can reach their memory (numpy views of host arrays; DLPack for a
device's, CuPy on the GPU) and takes the result back the same way, into the memory space the
inputs came from: a model on the GPU stays there. Only a memory space torch cannot reach (a test
backend's) is downloaded for torch and uploaded again; ``explain`` shows those moves.
"""

from __future__ import annotations

import copy
import numbers
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from .._records import MemorySpace
from .._ref import resolve_ref
from ..graph._node import Call, GraphError, Node, Pending, Shaped, examples, holds_pending, rebuilt
from .tensors import DTYPE_NAMES, TORCH_DTYPES, array_to_tensor, device_tensor, tensor_to_array

TORCH_DEVICES = ("cuda", "xpu", "mps")  # memory spaces named after the torch device their arrays live on


def reaches(space: MemorySpace) -> bool:
    """Whether torch reads and writes this memory space's arrays in place (through DLPack)."""
    return space.is_host or (space.name in TORCH_DEVICES and space.from_dlpack is not None)


class TorchRunner:
    """Runs the torch nodes of one Model (its modules placed on each device once)."""

    def __init__(self) -> None:
        self._placed: dict[tuple[int, str], nn.Module] = {}  # (id(module), device) -> the module there

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._placed = {}

    def infer(self, node: Node, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What the call returns, arrays as ``Shaped``. Python numbers it computes from data (``x.item()``:
        no meta kernel, so run on zeros; or from numbers computed at each call) are ``Pending``."""
        from_data = holds_pending((args, kwargs))
        args, kwargs = examples(args), examples(kwargs)
        try:
            return _known(self._invoke(call.target, _meta(args), _meta(kwargs), "meta"), known=not from_data)
        except Exception:  # an op without a meta kernel: run it once on zeros
            try:
                result = self._invoke(call.target, _zeros(args), _zeros(kwargs), "cpu")
            except Exception as exc:
                raise GraphError(f"node {node.name!r} ({call.label}): PyTorch cannot run it on inputs "
                                 f"{_shown(args)}: {type(exc).__name__}: {exc}") from None
        return _known(result, known=False)

    def runner(self, node: Node, call: Call, space: MemorySpace) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
        enter = None if space.from_dlpack is None or not reaches(space) else resolve_ref(space.from_dlpack)

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            tensors, keywords = _tensors(args, space), _tensors(kwargs, space)
            device = _device_of((tensors, keywords))
            with torch.no_grad():
                result = self._invoke(call.target, tensors, keywords, device)
            return _arrays(result, space, enter)

        return run

    def _invoke(self, target: Any, args: Any, kwargs: Any, device: str) -> Any:
        if isinstance(target, str):
            return getattr(args[0], target)(*args[1:], **kwargs)
        if isinstance(target, nn.Module):
            target = self._module_on(target, device)
        return target(*args, **kwargs)

    def _module_on(self, module: nn.Module, device: str) -> nn.Module:
        key = (id(module), device)
        placed = self._placed.get(key)
        if placed is None:
            tensors = [*module.parameters(), *module.buffers()]
            here = not tensors or all(str(t.device) == device for t in tensors)
            placed = self._placed[key] = module if here else copy.deepcopy(module).to(device)
        return placed


def _meta(value: Any) -> Any:
    if isinstance(value, Shaped):
        return torch.empty(value.shape, dtype=TORCH_DTYPES[value.dtype], device="meta")
    return rebuilt(value, _meta)


def _zeros(value: Any) -> Any:
    if isinstance(value, Shaped):
        return torch.zeros(value.shape, dtype=TORCH_DTYPES[value.dtype])
    return rebuilt(value, _zeros)


def _known(value: Any, known: bool) -> Any:
    """A result as planning knows it: tensors as ``Shaped``; numbers as they are where ``known`` (shapes'
    arithmetic on meta tensors), else ``Pending`` (the zeros they were computed from are no data)."""
    if isinstance(value, torch.Tensor):
        return Shaped(tuple(int(s) for s in value.shape), DTYPE_NAMES.get(value.dtype, str(value.dtype)))
    if isinstance(value, torch.Size):
        return tuple(int(s) for s in value)
    if not known and isinstance(value, (numbers.Number, np.generic)):
        return Pending(value)
    return rebuilt(value, lambda v: _known(v, known))


def _tensors(value: Any, space: MemorySpace) -> Any:
    """Arrays of ``space`` as tensors sharing their memory where torch reaches it."""
    if isinstance(value, np.ndarray):
        return array_to_tensor(value if value.flags.writeable else value.copy())
    if not space.is_host and hasattr(value, "shape") and hasattr(value, "dtype"):
        if reaches(space):
            return device_tensor(value)
        return array_to_tensor(space.download(value))
    return rebuilt(value, lambda v: _tensors(v, space))


def _arrays(value: Any, space: MemorySpace, enter: Any) -> Any:
    """Tensors as arrays of ``space`` (through DLPack or numpy views where possible)."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.device.type != "cpu" and enter is not None:
            return enter(tensor)
        array = tensor_to_array(tensor.cpu())
        return array if space.is_host else space.upload(np.ascontiguousarray(array))
    if isinstance(value, torch.Size):
        return tuple(value)
    return rebuilt(value, lambda v: _arrays(v, space, enter))


def _device_of(value: Any) -> str:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            return str(item.device)
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return "cpu"


def _shown(args: Any) -> str:
    return ", ".join(f"{a.dtype}{list(a.shape)}" if isinstance(a, Shaped) else repr(a) for a in args)
