"""Selectors: from the user's ``algos`` argument to one request string per layer.

A selector is a string, a list of strings in forward order, a dict from layer name to string,
or a function of the module (or of the module and its input shape, batch included). Strings are
"default", "auto", an algorithm name, or "backend:algorithm".
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import torch
from torch import nn

from .._errors import AlgoswapError, OpArgumentError
from .._global import get_registry
from .._select import check_known, select
from .._spec import Shape
from .bridge import _DTYPE_NAMES, memory_of
from .modules import binding_for, require_binding

Selector = Union[None, str, Sequence[str], dict[str, str], Callable[..., str]]


class SelectorError(AlgoswapError, ValueError):
    """A selector that does not fit the model: wrong length, unknown layer, bad or unsupported choice."""


@dataclass
class Layer:
    """A swappable module of the model, with the input shape it saw on the sample input."""

    name: str
    module: nn.Module
    input_shape: Shape | None = None
    input_dtype: torch.dtype | None = None


def find_layers(root: nn.Module, op: str, sample_input_shape: Sequence[int] | None, dtype: torch.dtype | None) -> list[Layer]:
    """Modules of ``root`` that run ``op``: in forward order with their input shapes when a sample
    input shape is given (one forward pass records them), else in registration order."""
    layers = {id(m): Layer(name, m) for name, m in root.named_modules() if (b := binding_for(m)) and b.op == op}
    if sample_input_shape is None or not layers:
        return list(layers.values())
    order: list[Layer] = []

    def record(module: nn.Module, args: tuple[Any, ...]) -> None:
        layer = layers[id(module)]
        if layer.input_shape is None and args and isinstance(args[0], torch.Tensor):
            layer.input_shape, layer.input_dtype = tuple(args[0].shape), args[0].dtype
            order.append(layer)

    handles = [layer.module.register_forward_pre_hook(record) for layer in layers.values()]
    try:
        with torch.no_grad():
            root(torch.randn(tuple(sample_input_shape), dtype=dtype or _float_dtype(root), device=_device(root)))
    finally:
        for handle in handles:
            handle.remove()
    return order + [layer for layer in layers.values() if layer.input_shape is None]


def _float_dtype(root: nn.Module) -> torch.dtype:
    return next((p.dtype for p in root.parameters() if p.is_floating_point()), torch.float32)


def _device(root: nn.Module) -> torch.device:
    return next((p.device for p in root.parameters()), torch.device("cpu"))


def resolve(caller: str, op: str, layers: list[Layer], algos: Selector) -> list[str]:
    """One validated request per layer (errors name the layer)."""
    if algos is None or isinstance(algos, str):
        requests = [algos or "default"] * len(layers)
    elif isinstance(algos, dict):
        requests = _from_dict(caller, op, layers, algos)
    elif callable(algos):
        requests = [_from_function(caller, op, layer, algos) for layer in layers]
    elif isinstance(algos, (list, tuple)):
        if len(algos) != len(layers):
            names = ", ".join(layer.name for layer in layers)
            raise SelectorError(f"{caller}: got {len(algos)} algorithms for {len(layers)} {op} layers (in forward order: {names})")
        requests = list(algos)
    else:
        raise SelectorError(f"{caller}: algos must be a string, a list, a dict or a function; got {type(algos).__name__}")
    for layer, request in zip(layers, requests):
        check_request(caller, op, layer, request)
    return requests


def _from_dict(caller: str, op: str, layers: list[Layer], algos: dict[str, str]) -> list[str]:
    known = {layer.name for layer in layers}
    unknown = [name for name in algos if name not in known]
    if unknown:
        raise SelectorError(f"{caller}: no {op} layer named {', '.join(map(repr, unknown))}; {op} layers: {', '.join(sorted(known))}")
    return [algos.get(layer.name, "default") for layer in layers]


def _from_function(caller: str, op: str, layer: Layer, function: Callable[..., str]) -> str:
    wants_shape = _positional_count(function) >= 2
    if wants_shape and layer.input_shape is None:
        raise SelectorError(f"{caller}: layer {layer.name!r}: the selector takes the input shape; pass sample_input_shape (batch included)")
    try:
        request = function(layer.module, layer.input_shape) if wants_shape else function(layer.module)
    except AlgoswapError:
        raise
    except Exception as exc:
        raise SelectorError(f"{caller}: layer {layer.name!r}: the selector raised {type(exc).__name__}: {exc}") from exc
    return request


def _positional_count(function: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in parameters)


def check_request(caller: str, op: str, layer: Layer, request: Any) -> None:
    """Refuse a malformed or unknown request, or one that cannot serve the layer's input."""
    where = f"{caller}: layer {layer.name!r} ({op}"
    where += f", input {layer.input_shape})" if layer.input_shape else ")"
    if not isinstance(request, str):
        raise SelectorError(f"{where}: the selector returned {request!r}; expected a string such as 'default' or 'numpy:smm'")
    try:
        check_known(get_registry(), op, request)
        binding = require_binding(layer.module)
        attrs = binding.attrs(layer.module)
        get_registry().spec(op).canonical_attrs(attrs)
        if layer.input_shape is not None:
            _select_for(op, layer, request, attrs)
    except (OpArgumentError, AlgoswapError) as exc:
        raise SelectorError(f"{where}: {exc}") from None


def _select_for(op: str, layer: Layer, request: str, attrs: dict[str, Any]) -> Any:
    binding = require_binding(layer.module)
    if layer.input_shape is None:
        raise SelectorError(f"layer {layer.name!r} has no recorded input shape: pass sample_input_shape")
    x = torch.empty(layer.input_shape, dtype=layer.input_dtype, device="meta")
    tensors = binding.inputs(layer.module, x)
    shapes = [None if t is None else tuple(t.shape) for t in tensors]
    dtypes = [None if t is None else _DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in tensors]
    device_of = next((t for t in tensors[1:] if t is not None), None)
    memory = None if request == "auto" else (memory_of(device_of) if device_of is not None else "host")
    return select(get_registry(), op, shapes, dtypes, attrs, request, memory)


def prefer(*requests: str, otherwise: str = "default") -> Callable[[nn.Module, Shape], str]:
    """A selector taking, for each layer, the first of ``requests`` that supports it, else ``otherwise``.

    >>> swap_conv2d(model, prefer("winograd"), sample_input_shape=(1, 3, 224, 224))
    """

    def choose(module: nn.Module, input_shape: Shape) -> str:
        binding = binding_for(module)
        if binding is None:
            return otherwise
        dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
        layer = Layer("", module, tuple(input_shape), dtype)
        for request in requests:
            try:
                _select_for(binding.op, layer, request, binding.attrs(module))
                return request
            except AlgoswapError:
                continue
        return otherwise

    choose.__name__ = f"prefer({', '.join(map(repr, requests))})"
    return choose
