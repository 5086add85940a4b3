"""Torch modules the registry can swap: which op each runs, its attributes, and its swapped class.

A swapped module is the original module object's state under a subclass whose ``forward`` runs
the registry: parameters, buffers and hooks are the very same objects, so ``state_dict`` keys,
optimizers, pickling, deep copies, ``.to()`` and ``torch.compile`` keep working.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

from .._errors import OpArgumentError
from .._global import get_registry
from .._requests import IN_TORCH
from .._spec import Shape
from .bridge import call_custom_op, run_eager
from .prepared import CallSite, encode_attrs

LEFT_IN_TORCH = "algoswap_left_in_torch"  # marks a module a selector left in PyTorch (for explain)


@dataclass(frozen=True)
class ModuleBinding:
    """How a torch module type maps onto a registry op."""

    module_type: type[nn.Module]
    op: str
    attrs: Callable[[Any], dict[str, Any]]
    inputs: Callable[[Any, torch.Tensor], list[Optional[torch.Tensor]]] = lambda module, x: [x]
    batched_rank: int | None = None  # unbatched inputs (one rank less) get a batch dimension added


def _conv2d_attrs(m: nn.Conv2d) -> dict[str, Any]:
    return {"stride": m.stride, "padding": m.padding, "dilation": m.dilation, "groups": m.groups, "padding_mode": m.padding_mode}


def _maxpool_attrs(m: nn.MaxPool2d) -> dict[str, Any]:
    if m.return_indices:
        raise OpArgumentError("maxpool2d", "return_indices", True, "False (indices are not computed by algoswap ops)")
    return {"kernel_size": m.kernel_size, "stride": m.stride, "padding": m.padding, "dilation": m.dilation, "ceil_mode": m.ceil_mode}


def _avgpool_attrs(m: nn.AvgPool2d) -> dict[str, Any]:
    return {"kernel_size": m.kernel_size, "stride": m.stride, "padding": m.padding, "ceil_mode": m.ceil_mode,
            "count_include_pad": m.count_include_pad, "divisor_override": m.divisor_override}


def _weight_and_bias(m: nn.Module, x: torch.Tensor) -> list[Optional[torch.Tensor]]:
    """[x, m.weight, m.bias], the parameters read from ``_parameters`` where they are (``m.weight`` goes
    through ``nn.Module.__getattr__``: 0.8 us each), else as attributes (weight_norm, parametrize)."""
    params = m._parameters
    weight: Any = params["weight"] if "weight" in params else m.weight
    bias: Any = params["bias"] if "bias" in params else m.bias
    return [x, weight, bias]


BINDINGS: dict[type[nn.Module], ModuleBinding] = {}


def register_module_binding(binding: ModuleBinding) -> type[nn.Module]:
    """Make ``binding.module_type`` swappable; returns its swapped class (importable, so picklable)."""
    BINDINGS[binding.module_type] = binding
    name = f"Swapped{binding.module_type.__name__}"
    namespace = {"__module__": __name__, "__qualname__": name, "algoswap_base": binding.module_type}
    cls = type(name, (SwappedModule, binding.module_type), namespace)
    setattr(sys.modules[__name__], name, cls)
    return cls


class SwappedModule(nn.Module):
    """Mixin of every swapped module: ``forward`` runs the registry with this layer's request and its
    attributes as they are at the call (``conv.stride = 2`` after swapping takes effect, as in torch)."""

    algoswap_base: type[nn.Module]
    algoswap_request: str = "default"
    algoswap_attrs: str = "{}"  # the attributes encoded for the bridge, as of algoswap_attr_values
    algoswap_attr_values: dict[str, Any] | None = None
    algoswap_last_input: tuple[Shape, torch.dtype] | None = None
    algoswap_site: CallSite | None = None  # its calls' site (the last call bound to its inputs), made at the first

    @property
    def algoswap_binding(self) -> ModuleBinding:
        return BINDINGS[self.algoswap_base]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        binding = BINDINGS[self.algoswap_base]
        unbatched = binding.batched_rank is not None and x.dim() == binding.batched_rank - 1
        if unbatched:
            x = x.unsqueeze(0)
        compiling = torch.compiler.is_compiling()
        if not compiling:
            self.__dict__["algoswap_last_input"] = (x.shape, x.dtype)
        attrs = binding.attrs(self)
        if attrs != self.algoswap_attr_values:  # changed since the last call (or set by hand): checked again
            set_attrs(self, binding.op, attrs)
        inputs = binding.inputs(self, x)
        if compiling:
            out = call_custom_op(binding.op, self.algoswap_request, self.algoswap_attrs, inputs)
        else:
            site = self.algoswap_site or self.__dict__.setdefault("algoswap_site", CallSite())
            out = run_eager(binding.op, self.algoswap_request, self.algoswap_attrs, inputs, site)
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        base = super().extra_repr()
        return f"{base}, algorithm={self.algoswap_request!r}" if base else f"algorithm={self.algoswap_request!r}"


def set_attrs(module: SwappedModule, op: str, attrs: dict[str, Any]) -> None:
    """Make ``attrs`` (checked by the op's spec: a bad value is an error naming it) the attributes a
    swapped module runs with."""
    get_registry().spec(op).canonical_attrs(attrs)
    module.__dict__.update(algoswap_attrs=encode_attrs(attrs), algoswap_attr_values=attrs)


def swap_in(module: nn.Module, request: str, attrs: dict[str, Any]) -> nn.Module:
    """The swapped twin of ``module``: a new object sharing all of its state."""
    cls = getattr(sys.modules[__name__], f"Swapped{_base(module).__name__}")
    twin: SwappedModule = cls.__new__(cls)
    twin.__dict__.update(module.__dict__)
    twin.__dict__.pop(LEFT_IN_TORCH, None)
    twin.__dict__.pop("algoswap_site", None)
    twin.__dict__.update(algoswap_request=request, algoswap_attrs=encode_attrs(attrs), algoswap_attr_values=attrs)
    return twin


def plain(module: nn.Module) -> nn.Module:
    """``module`` as its own torch class: a swapped module's original-class twin sharing all of its state."""
    if not isinstance(module, SwappedModule):
        return module
    base = _base(module)
    twin = base.__new__(base)
    twin.__dict__.update({k: v for k, v in module.__dict__.items() if not k.startswith("algoswap_")})
    return twin


def original(module: nn.Module) -> nn.Module:
    """``module`` as its own torch class, unmarked: what a ``swap_with`` class is constructed from."""
    made = plain(module)
    made.__dict__.pop(LEFT_IN_TORCH, None)
    return made


def leave_in_torch(module: nn.Module) -> nn.Module:
    """``module`` run by PyTorch (the selector asked for "torch"), marked so that ``explain`` lists it."""
    kept = plain(module)
    kept.__dict__[LEFT_IN_TORCH] = True
    return kept


def own_request(module: nn.Module | None) -> str:
    """The request a layer swapped before keeps: its own, "torch" where a selector left it in PyTorch, else "default"."""
    if isinstance(module, SwappedModule):
        return module.algoswap_request
    return IN_TORCH if module is not None and module.__dict__.get(LEFT_IN_TORCH) else "default"


def _base(module: nn.Module) -> type[nn.Module]:
    return module.algoswap_base if isinstance(module, SwappedModule) else type(module)


def binding_for(module: nn.Module) -> ModuleBinding | None:
    """The binding of a module (swapped or not), or None if no op serves its type."""
    return BINDINGS.get(_base(module))


def batched(binding: ModuleBinding, shape: Shape) -> Shape:
    """An input shape with the batch dimension an unbatched input (one rank short) gets added."""
    return (1, *shape) if binding.batched_rank is not None and len(shape) == binding.batched_rank - 1 else tuple(shape)


def batched_ranks() -> dict[str, int]:
    """The ops whose modules torch also runs on one unbatched sample, and the rank of their batched input."""
    return {b.op: b.batched_rank for b in BINDINGS.values() if b.batched_rank is not None}


def require_binding(module: nn.Module) -> ModuleBinding:
    """The binding of a module, or an error saying no op serves its type."""
    binding = binding_for(module)
    if binding is None:
        known = ", ".join(b.module_type.__name__ for b in BINDINGS.values())
        raise OpArgumentError("swap_operation", "module", type(module).__name__, f"a swappable module ({known})")
    return binding


def ops_with_modules() -> dict[str, type[nn.Module]]:
    return {b.op: b.module_type for b in BINDINGS.values()}


for _binding in (
    ModuleBinding(nn.Conv2d, "conv2d", _conv2d_attrs, _weight_and_bias, batched_rank=4),
    ModuleBinding(nn.Linear, "linear", lambda m: {}, _weight_and_bias),
    ModuleBinding(nn.MaxPool2d, "maxpool2d", _maxpool_attrs, batched_rank=4),
    ModuleBinding(nn.AvgPool2d, "avgpool2d", _avgpool_attrs, batched_rank=4),
    ModuleBinding(nn.AdaptiveAvgPool2d, "adaptiveavgpool2d", lambda m: {"output_size": m.output_size}, batched_rank=4),
    ModuleBinding(nn.ReLU, "relu", lambda m: {}),
    ModuleBinding(nn.Flatten, "flatten", lambda m: {"start_dim": m.start_dim, "end_dim": m.end_dim}),
):
    register_module_binding(_binding)
