"""The swappable layers of a torch model, and the check that a request serves one.

The selector forms (``algorithm=``) are the core's (``algoswap._requests``); this module finds the
layers (with their input shapes, from one forward pass) and tells the resolver whether a request
serves a layer's attributes and recorded input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from .._errors import AlgoswapError, OpArgumentError, SelectorError
from .._global import get_registry
from .._requests import Selector, Subject, assign, prefer
from .._select import Selection, select
from .._spec import Shape
from .custom import SWAPPED_WITH
from .tensors import DTYPE_NAMES
from .transfer import memory_of
from .modules import batched, binding_for, require_binding

__all__ = ["Layer", "Selector", "SelectorError", "find_layers", "prefer", "resolve"]


@dataclass
class Layer:
    """A swappable module of the model, with the input shape it saw on the sample input."""

    name: str
    module: nn.Module
    input_shape: Shape | None = None
    input_dtype: torch.dtype | None = None


def find_layers(caller: str, root: nn.Module, op: str, sample_input_shape: Sequence[int] | None,
                dtype: torch.dtype | None) -> list[Layer]:
    """Modules of ``root`` that run ``op``: in forward order with their input shapes when a sample
    input shape is given (one forward pass records them), else in registration order. The layers inside
    one a ``swap_with`` class made are its own (the layer it was built from, say): they are not swapped."""
    owned = [f"{name}." for name, m in root.named_modules() if SWAPPED_WITH in m.__dict__]
    layers = {id(m): Layer(name, m) for name, m in root.named_modules()
              if (b := binding_for(m)) and b.op == op and not any(name.startswith(prefix) for prefix in owned)}
    if sample_input_shape is None or not layers:
        return list(layers.values())
    order: list[Layer] = []

    def record(module: nn.Module, args: tuple[Any, ...]) -> None:
        layer = layers[id(module)]
        if layer.input_shape is None and args and isinstance(args[0], torch.Tensor):
            layer.input_shape, layer.input_dtype = tuple(args[0].shape), args[0].dtype
            order.append(layer)

    handles = [layer.module.register_forward_pre_hook(record) for layer in layers.values()]
    shape = tuple(sample_input_shape)
    try:
        with torch.no_grad():
            root(torch.randn(shape, dtype=dtype or _float_dtype(root), device=_device(root)))
    except AlgoswapError:
        raise
    except Exception as exc:
        raise OpArgumentError(caller, "sample_input_shape", shape,
                              f"the shape of an input the module runs on (it raised {type(exc).__name__}: {exc})") from exc
    finally:
        for handle in handles:
            handle.remove()
    return order + [layer for layer in layers.values() if layer.input_shape is None]


def _float_dtype(root: nn.Module) -> torch.dtype:
    return next((p.dtype for p in root.parameters() if p.is_floating_point()), torch.float32)


def _device(root: nn.Module) -> torch.device:
    return next((p.device for p in root.parameters()), torch.device("cpu"))


def resolve(caller: str, op: str, layers: list[Layer], algorithm: Selector, backends: Sequence[str] | None = None,
            registry_requests: bool = True) -> list[str]:
    """One validated request per layer (``algorithm`` is the op's selector; errors name the layer).
    ``registry_requests=False``: the requests are for a ``swap_with`` class, which takes them as they are."""
    by_name = {layer.name: layer for layer in layers}
    subjects = [Subject(op, layer.name, layer.module, layer.input_shape) for layer in layers]
    selector = None if algorithm is None else {op: algorithm}
    check = (lambda subject, request: _check_layer(by_name[subject.name], request)) if registry_requests else None
    return assign(caller, subjects, selector, backends, check, in_torch=True, registry_requests=registry_requests)


def _check_layer(layer: Layer, request: str) -> None:
    """Refuse a request that cannot serve the layer: its attributes, and its input when recorded."""
    binding = require_binding(layer.module)
    attrs = binding.attrs(layer.module)
    get_registry().spec(binding.op).canonical_attrs(attrs)
    if layer.input_shape is not None:
        _select_for(binding.op, layer, request, attrs)


def _select_for(op: str, layer: Layer, request: str, attrs: dict[str, Any]) -> Selection:
    """The selection for the layer's recorded input (an unbatched one as the batch of one it runs as), in
    the memory of its weights' device."""
    binding = require_binding(layer.module)
    shape = batched(binding, layer.input_shape or ())
    tensors = binding.inputs(layer.module, torch.empty(shape, dtype=layer.input_dtype, device="meta"))
    shapes = [None if t is None else tuple(t.shape) for t in tensors]
    dtypes = [None if t is None else DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in tensors]
    device_of = next((t for t in tensors[1:] if t is not None), None)
    memory = None if request == "auto" else (memory_of(device_of) if device_of is not None else "host")
    return select(get_registry(), op, shapes, dtypes, attrs, request, memory)
