"""What lowering makes of one torch.fx node, and the helpers every rule table shares.

A rule (``Handler``) turns one fx node into one of:

- ``LoweredOp``: a registry op, its inputs (fx nodes, constant tensors, None, or other ``LoweredOp``s
  computed first as part of the same node: ``x[:, 0]`` is a slice then a reshape) and attributes
  (which may hold fx nodes whose Python values are only known per call, e.g. ``x.size(0)``, and
  ``Deferred`` values computed from the inputs' shapes when planning);
- ``Alias``: the node's value is another node's (dropout in eval mode, ``contiguous``);
- ``PythonCall``: arithmetic on Python values (sizes, shapes, tuple items), or a shape guard;
- ``Constant``: a value computed from the model's weights alone, once, at conversion;
- ``Parts``: a tuple of tensors (``chunk``, ``unbind``, ``MultiheadAttention``, ``x.max(dim)``) whose items
  the ``getitem`` (or field-reading ``getattr``) nodes reading them lower, each on its own;
- or raises ``Unsupported(reason)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from torch import fx, nn

if TYPE_CHECKING:
    from .lowering import Lowerer


class Unsupported(Exception):
    """A node no registry op runs; the message says why."""


@dataclass(eq=False)
class LoweredOp:
    op: str
    inputs: list[Any]
    attrs: dict[str, Any]
    module: nn.Module | None = None
    folded: list[str] = field(default_factory=list)  # the batch norms folded into it
    scaled: list[str] = field(default_factory=list)  # the muls by a constant folded into its weights (fold_scale.py)


@dataclass(eq=False)
class Deferred:
    """A Python value computed when a Model is planned, by ``function`` (module level, so that models
    pickle) from ``args``: arrays stand for their shapes there (``Shaped``), fx nodes for their values.
    A transpose's permutation from its input's rank, a slice's bounds from its input's sizes: every
    input shape a Model meets is planned anew, so these are computed again for each."""

    function: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass
class Alias:
    source: Any


@dataclass
class PythonCall:
    function: Callable[..., Any]
    args: tuple[Any, ...]
    python_result: bool = True  # False: the result may be a tensor (an item of a fallback node's tuple)
    guard: bool = False  # a check with no value (torch._assert): planned for every input shape


@dataclass
class Constant:
    """The node's value, computed now from weights and literals only (a relative-position-bias table)."""

    value: Any


@dataclass
class Parts:
    """A tuple-valued node; ``item(i)`` lowers its i-th item (each ``getitem`` node reading it, or each
    ``getattr`` reading a field of torch's named tuple: ``fields`` of ``torch.return_types.max``)."""

    item: Callable[[int], "Lowered"]
    fields: tuple[str, ...] = ()


Lowered = LoweredOp | Alias | PythonCall | Constant | Parts
Handler = Callable[["Lowerer", fx.Node], Lowered]

_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD


def signature(*required: str, **optional: Any) -> inspect.Signature:
    """A call signature: required parameters, then optional ones with their defaults."""
    params = [inspect.Parameter(name, _KEYWORD) for name in required]
    params += [inspect.Parameter(name, _KEYWORD, default=value) for name, value in optional.items()]
    return inspect.Signature(params)


def varargs(name: str, *required: str, **keywords: Any) -> inspect.Signature:
    """A signature ``(required..., *name, **keywords)``: ``x.permute(0, 2, 1)``, ``x.expand(n, -1)``."""
    params = [inspect.Parameter(r, _KEYWORD) for r in required]
    params.append(inspect.Parameter(name, inspect.Parameter.VAR_POSITIONAL))
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in keywords.items()]
    return inspect.Signature(params)


def sizes_argument(values: tuple[Any, ...]) -> Any:
    """The sizes of ``x.view(2, 3)``, ``x.view((2, 3))`` or ``x.view(shape)``, as one value."""
    if len(values) == 1 and not isinstance(values[0], int):
        return tuple(values[0]) if isinstance(values[0], list) else values[0]
    return tuple(values)


def contains_node(value: Any) -> bool:
    """Whether ``value`` holds an fx node or a ``Deferred`` (its value is only known when planning)."""
    if isinstance(value, (fx.Node, Deferred)):
        return True
    if isinstance(value, (list, tuple)):
        return any(contains_node(v) for v in value)
    if isinstance(value, dict):
        return any(contains_node(v) for v in value.values())
    return False


def fx_nodes(*values: Any) -> list[fx.Node]:
    """The fx nodes inside ``values`` (through lists, tuples, dicts and slices), in order."""
    found: list[fx.Node] = []
    fx.node.map_arg(values, found.append)
    return found


def deferred(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` now when no argument waits for planning (no array, no fx node), else later."""
    if any(isinstance(a, LoweredOp) or contains_node(a) for a in args):
        return Deferred(function, args)
    return function(*args)


def target_name(target: Any) -> str:
    """A readable name of an fx target: "torch.sigmoid", "operator.mul", "Tensor.view"."""
    if isinstance(target, str):
        return target
    try:
        return str(fx.node._get_qualified_name(target))
    except Exception:
        return getattr(target, "__name__", repr(target))


def describe(root: nn.Module, node: fx.Node) -> str:
    """What a node calls: "LayerNorm module 'norm'", "Tensor.view", "torch.sigmoid"."""
    if node.op == "call_module":
        return f"{type(root.get_submodule(str(node.target))).__name__} module {node.target!r}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return target_name(node.target)


def op_rule(op: str, sig: inspect.Signature, inputs: tuple[str, ...], drop: tuple[str, ...] = (),
            require: dict[str, Any] | None = None) -> Handler:
    """A node that maps onto ``op``: the named arguments are its inputs, the others its attributes
    (except ``drop``ped ones); ``require`` lists arguments that must have one value."""

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        for name, allowed in (require or {}).items():
            if bound[name] != allowed:
                raise Unsupported(f"{name}={bound[name]!r} (only {name}={allowed!r} is supported)")
        skip = set(inputs) | set(drop) | set(require or {})
        return LoweredOp(op, [bound[name] for name in inputs], {k: v for k, v in bound.items() if k not in skip})

    return handler
