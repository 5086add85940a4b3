"""swap_conv2d and swap_operation: replace layers of a torch model, in place, by registry ops."""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

import torch
from torch import nn

from .._errors import OpArgumentError, SelectorError
from .._requests import IN_TORCH, Selector, selector_argument
from .custom import constructed, custom_backend
from .modules import BINDINGS, SwappedModule, leave_in_torch, original, require_binding, swap_in
from .selectors import Layer, find_layers, resolve

OpName = Union[str, type]


def _op_name(op: OpName) -> str:
    if isinstance(op, type):
        binding = BINDINGS.get(op) or next((b for b in BINDINGS.values() if issubclass(op, b.module_type)), None)
        if binding is None:
            raise OpArgumentError("swap_operation", "op", op.__name__, f"a swappable module type ({_known()})")
        return binding.op
    if op not in {b.op for b in BINDINGS.values()}:
        raise OpArgumentError("swap_operation", "op", op, f"an op with a torch module ({_known()})")
    return op


def _known() -> str:
    return ", ".join(f"{b.op} ({b.module_type.__name__})" for b in BINDINGS.values())


def swap_operation(
    op: OpName,
    module: nn.Module,
    algorithm: Selector = None,
    sample_input_shape: Sequence[int] | None = None,
    *,
    dtype: torch.dtype | None = None,
    backends: Sequence[str] | None = None,
    swap_with: Callable[..., Any] | None = None,
    algos: Selector = None,
    algorithms: Selector = None,
) -> nn.Module:
    """Replace, in place, every module of ``module`` that runs ``op`` by one that runs the
    registry's implementation chosen by ``algorithm`` (a selector: a request, a list in forward
    order, a dict by layer name, a function, ``prefer(...)``; ``algos`` and ``algorithms`` are its
    old names); a layer given ``"torch"`` stays a plain torch module. ``backends`` (e.g.
    ``["dnnl", "numpy"]``) serves the layers the selector gives no request with the first listed
    backend that implements the op. Returns ``module`` (or its replacement, when ``module`` is
    itself such a layer). Calling it again re-selects.

    ``swap_with`` (a function of numpy arrays called like an implementation of the op: the inputs
    positionally, the canonical attributes as keywords) is registered as the implementation
    ``<its name>:custom`` and serves the layers the selector gives no request, before ``backends``.
    A class instead (the swapping library's form, e.g. an ``nn.Module``) is constructed as
    ``swap_with(layer, algorithm)`` for each layer the selector does not leave in PyTorch, with
    ``algorithm`` the selector's answer for it as given ("default" where it gives none; not checked
    against the registry: the class reads it); the instance replaces the layer and runs as written.

    ``sample_input_shape`` (batch included, or one unbatched sample where the op's module takes one)
    runs one forward pass to learn each layer's input shape: selectors then see real input shapes,
    list selectors follow the forward order, and each choice is checked against its layer now
    rather than at the first call.
    """
    name = _op_name(op)
    caller = "swap_conv2d" if name == "conv2d" else f"swap_operation({name!r})"
    selector = selector_argument(caller, algorithm, algos=algos, algorithms=algorithms)
    cls = swap_with if isinstance(swap_with, type) else None
    if cls is not None and backends is not None:
        raise OpArgumentError(caller, "backends", backends, f"None with swap_with={cls.__name__}, a class: its instances "
                              "run the layers, backends choose among the registry's implementations")
    if swap_with is not None and cls is None:
        backends = [custom_backend(caller, name, swap_with), *(backends or [])]
    layers = find_layers(caller, module, name, sample_input_shape, dtype)
    requests = resolve(caller, name, layers, selector, backends, registry_requests=cls is None)
    replacements = {id(layer.module): _swapped(caller, layer, request, cls) for layer, request in zip(layers, requests)}
    for parent in list(module.modules()):  # the tree before replacing: a swap_with instance may hold its layer
        for child_name, child in list(parent._modules.items()):
            if child is not None and id(child) in replacements:
                parent._modules[child_name] = replacements[id(child)]
    return replacements.get(id(module), module)


def _swapped(caller: str, layer: Layer, request: str, cls: type | None) -> nn.Module:
    if request == IN_TORCH:
        return leave_in_torch(layer.module)
    binding = require_binding(layer.module)
    if cls is not None:
        shape = None if layer.input_shape is None else tuple(layer.input_shape)
        return constructed(caller, cls, binding.op, layer.name, original(layer.module), request, shape)
    twin = swap_in(layer.module, request, binding.attrs(layer.module))
    if layer.input_shape is not None:
        twin.__dict__["algoswap_last_input"] = (layer.input_shape, layer.input_dtype)
    return twin


def swap_conv2d(
    module: nn.Module,
    algorithm: Selector = None,
    sample_input_shape: Sequence[int] | None = None,
    *,
    backends: Sequence[str] | None = None,
    swap_with: Callable[..., Any] | None = None,
    algos: Selector = None,
    algorithms: Selector = None,
) -> nn.Module:
    """Replace, in place, every ``nn.Conv2d`` of ``module`` by one running the selected algorithm
    (``swap_operation("conv2d", ...)``).

    >>> swap_conv2d(model, ["direct", "smm"])                         # per layer, in forward order
    >>> swap_conv2d(model, lambda conv, shape: "winograd" if conv.kernel_size == (3, 3) else "smm",
    ...             sample_input_shape=(1, 3, 224, 224))
    >>> swap_conv2d(model, {"conv1": "torch"}, swap_with=my_conv)    # conv1 stays in torch, my_conv runs the others
    >>> swap_conv2d(model, ["direct", "smm"], None, swap_with=SpecialConv)  # SpecialConv(conv, "direct") replaces the first
    """
    selector = selector_argument("swap_conv2d", algorithm, algos=algos, algorithms=algorithms)
    return swap_operation("conv2d", module, selector, sample_input_shape, backends=backends, swap_with=swap_with)


def swapped_layers(module: nn.Module) -> list[tuple[str, SwappedModule]]:
    """Every swapped layer of ``module`` with its qualified name."""
    return [(name, m) for name, m in module.named_modules() if isinstance(m, SwappedModule)]


__all__ = ["swap_operation", "swap_conv2d", "swapped_layers", "SelectorError"]
