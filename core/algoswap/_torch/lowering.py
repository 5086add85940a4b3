"""The node table of ``swap_backend``: which registry op (if any) runs each node of a traced model.

``Lowerer.lower(node)`` turns one ``torch.fx`` node into:

- ``LoweredOp``: a registry op, its inputs (fx nodes, constant tensors, None) and attributes
  (which may hold fx nodes whose Python values are only known per call, e.g. ``x.size(0)``);
- ``Alias``: the node's value is another node's (dropout in eval mode, ``contiguous``);
- ``PythonCall``: arithmetic on Python values (sizes, shapes, tuple items);
- or raises ``Unsupported(reason)``.

Modules: those with a torch module binding (``Conv2d``, ``Linear``, the pools, ``ReLU``,
``Flatten``), ``BatchNorm2d`` (running statistics) and the dropouts / ``Identity``. Functions and
methods: see ``FUNCTIONS`` and ``METHODS``.
"""

from __future__ import annotations

import builtins
import inspect
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from .._errors import OpArgumentError
from .._global import get_registry
from .modules import binding_for


class Unsupported(Exception):
    """A node no registry op runs; the message says why."""


@dataclass
class LoweredOp:
    op: str
    inputs: list[Any]
    attrs: dict[str, Any]
    module: nn.Module | None = None
    folded: list[str] = field(default_factory=list)


@dataclass
class Alias:
    source: Any


@dataclass
class PythonCall:
    function: Callable[..., Any]
    args: tuple[Any, ...]
    python_result: bool = True  # False: the result may be a tensor (an item of a fallback node's tuple)


# Python-value functions of python nodes (module-level, so that models pickle).


def size_of(array: Any, dim: int | None = None) -> Any:
    """``Tensor.size(dim)`` of an array: its shape as a tuple, or one size."""
    return tuple(array.shape) if dim is None else int(array.shape[dim])


def shape_of(array: Any) -> tuple[int, ...]:
    """``Tensor.shape`` of an array."""
    return tuple(array.shape)


def ndim_of(array: Any) -> int:
    """``Tensor.dim()`` / ``Tensor.ndim`` of an array."""
    return int(array.ndim)


PYTHON_OPERATORS: dict[Any, Callable[..., Any]] = {
    f: f for f in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
                   operator.neg, operator.getitem, operator.iadd, operator.imul)
}


Lowered = LoweredOp | Alias | PythonCall
Handler = Callable[["Lowerer", fx.Node], Lowered]

_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def signature(*required: str, **optional: Any) -> inspect.Signature:
    """A call signature: required parameters, then optional ones with their defaults."""
    params = [inspect.Parameter(name, _KEYWORD) for name in required]
    params += [inspect.Parameter(name, _KEYWORD, default=value) for name, value in optional.items()]
    return inspect.Signature(params)


def contains_node(value: Any) -> bool:
    if isinstance(value, fx.Node):
        return True
    if isinstance(value, (list, tuple)):
        return any(contains_node(v) for v in value)
    if isinstance(value, dict):
        return any(contains_node(v) for v in value.values())
    return False


class Lowerer:
    """Lowers the nodes of one traced model, in graph order (it remembers which hold Python values)."""

    def __init__(self, root: nn.Module) -> None:
        self.root = root
        self.python_nodes: set[fx.Node] = set()
        self.tensor_nodes: set[fx.Node] = set()

    def lower(self, node: fx.Node) -> Lowered:
        if node.op == "call_module":
            lowered = self._module(node)
        elif node.op == "call_function" and _hashable(node.target) and node.target in FUNCTIONS:
            lowered = FUNCTIONS[node.target](self, node)
        elif node.op == "call_method" and node.target in METHODS:
            lowered = METHODS[str(node.target)](self, node)
        else:
            raise Unsupported(_no_op(node))
        if isinstance(lowered, LoweredOp) and not contains_node(lowered.attrs):
            try:  # attributes computed in forward are checked at each call instead
                get_registry().spec(lowered.op).canonical_attrs(lowered.attrs)
            except OpArgumentError as exc:
                raise Unsupported(str(exc)) from None
        if isinstance(lowered, PythonCall) and lowered.python_result:
            self.python_nodes.add(node)
        elif isinstance(lowered, LoweredOp) or (isinstance(lowered, Alias) and self.is_tensor(lowered.source)):
            self.tensor_nodes.add(node)
        return lowered

    def is_python(self, value: Any) -> bool:
        """Whether ``value`` is a Python value (a literal, or a node computing sizes), not a tensor."""
        if isinstance(value, fx.Node):
            known = value.meta.get("type")  # recorded by shape propagation, when it ran
            return value in self.python_nodes if known is None else not issubclass(known, torch.Tensor)
        return not isinstance(value, torch.Tensor)

    def is_tensor(self, value: Any) -> bool:
        """Whether ``value`` is known to be a tensor (a fallback node's output may be anything)."""
        if not isinstance(value, fx.Node):
            return isinstance(value, torch.Tensor)
        known = value.meta.get("type")
        return value in self.tensor_nodes if known is None else issubclass(known, torch.Tensor)

    def bind(self, sig: inspect.Signature, node: fx.Node) -> dict[str, Any]:
        try:
            bound = sig.bind(*node.args, **node.kwargs)
        except TypeError as exc:
            raise Unsupported(f"arguments not understood ({exc})") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def operand(self, value: Any) -> Any:
        """A tensor operand of an elementwise op: a node, or a Python number as a constant 0-d tensor."""
        if isinstance(value, fx.Node):
            if self.is_python(value):
                raise Unsupported("an elementwise op between a tensor and a Python number computed in forward")
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return torch.tensor(float(value), dtype=torch.float64)
        raise Unsupported(f"an operand of type {type(value).__name__}")

    def _module(self, node: fx.Node) -> Lowered:
        module = self.root.get_submodule(str(node.target))
        if len(node.args) != 1 or node.kwargs:
            raise Unsupported(f"{type(module).__name__} called with {len(node.args)} arguments and keywords {sorted(node.kwargs)}")
        x = node.args[0]
        if isinstance(module, DROPOUT_MODULES + (nn.Identity,)):
            return Alias(x)
        binding = binding_for(module)
        if binding is not None:
            try:
                attrs = binding.attrs(module)
            except OpArgumentError as exc:
                raise Unsupported(str(exc)) from None
            sentinel = torch.empty(0, device="meta")
            inputs = [x if t is sentinel else t for t in binding.inputs(module, sentinel)]
            return LoweredOp(binding.op, inputs, attrs, module)
        if isinstance(module, nn.BatchNorm2d):
            if module.running_mean is None or module.running_var is None:
                raise Unsupported("batch norm without running statistics (track_running_stats=False) normalises with batch statistics")
            inputs = [x, module.running_mean, module.running_var, module.weight, module.bias]
            return LoweredOp("batchnorm2d", inputs, {"eps": module.eps}, module)
        raise Unsupported(f"no registry op runs {type(module).__name__} modules")


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True


def _no_op(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"no registry op runs Tensor.{node.target}"
    return f"no registry op runs {target_name(node.target)}"


def target_name(target: Any) -> str:
    """A readable name of an fx target: "torch.sigmoid", "operator.mul", "Tensor.view"."""
    if isinstance(target, str):
        return target
    try:
        return str(fx.node._get_qualified_name(target))
    except Exception:
        return getattr(target, "__name__", repr(target))


# ---------------------------------------------------------------------------- handlers


def op_rule(op: str, sig: inspect.Signature, inputs: tuple[str, ...], drop: tuple[str, ...] = (), require: dict[str, Any] | None = None) -> Handler:
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


def _identity_unless_training(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", p=0.5, training=True, inplace=False), node)
    if bound["training"] is not False:
        raise Unsupported("dropout with training=True (random); pass training=self.training and convert in eval mode")
    return Alias(bound["input"])


def _add(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "other", alpha=1), node)
    a, b = bound["input"], bound["other"]
    if lw.is_python(a) and lw.is_python(b) and bound["alpha"] == 1:
        return PythonCall(operator.add, (a, b))
    if bound["alpha"] != 1:
        raise Unsupported(f"alpha={bound['alpha']!r} (add computes a + b)")
    return LoweredOp("add", [lw.operand(a), lw.operand(b)], {})


def _python_only(function: Callable[..., Any]) -> Handler:
    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        if node.kwargs or not all(lw.is_python(a) for a in node.args):
            raise Unsupported(f"{target_name(function)} of tensors has no registry op")
        return PythonCall(function, tuple(node.args))

    return handler


def _getitem(lw: Lowerer, node: fx.Node) -> Lowered:
    """An item of a Python value (``x.shape[1]``) or of a fallback node's tuple (``torch.sort(x)[0]``)."""
    container, index = node.args[0], node.args[1]
    if lw.is_python(container):
        return PythonCall(operator.getitem, tuple(node.args))
    if lw.is_tensor(container) or not isinstance(index, int):
        raise Unsupported("indexing or slicing a tensor has no registry op")
    return PythonCall(operator.getitem, tuple(node.args), python_result=False)


def _getattr(lw: Lowerer, node: fx.Node) -> Lowered:
    obj, name = node.args[0], node.args[1]
    if lw.is_python(obj):
        return PythonCall(builtins.getattr, (obj, name))
    functions = {"shape": shape_of, "ndim": ndim_of}
    if name not in functions:
        raise Unsupported(f"tensor attribute {name!r} has no registry op")
    return PythonCall(functions[str(name)], (obj,))


def _cat(axis_name: str) -> Handler:
    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(signature("tensors", **{axis_name: 0}), node)
        tensors = bound["tensors"]
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise Unsupported("concatenating something other than a list of tensors")
        return LoweredOp("concat", list(tensors), {"axis": bound[axis_name]})

    return handler


def _view(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.view(a, b)``, ``x.view((a, b))``, ``x.view(shape)``, ``x.reshape(...)``: sizes may be computed in forward."""
    x, rest = node.args[0], node.args[1:]
    shape = node.kwargs.get("shape", node.kwargs.get("size"))
    if shape is None:
        shape = rest[0] if len(rest) == 1 and not isinstance(rest[0], int) else tuple(rest)
    if isinstance(shape, torch.dtype):
        raise Unsupported("Tensor.view(dtype) reinterprets the bytes; no registry op does that")
    return LoweredOp("reshape", [x], {"shape": tuple(shape) if isinstance(shape, list) else shape})


def _reshape(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "shape"), node)
    shape = bound["shape"]
    return LoweredOp("reshape", [bound["input"]], {"shape": tuple(shape) if isinstance(shape, list) else shape})


def _size(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("self", dim=None), node)
    return PythonCall(size_of, (bound["self"], bound["dim"]))


def _method_alias(lw: Lowerer, node: fx.Node) -> Lowered:
    return Alias(node.args[0])


_RELU = op_rule("relu", signature("input", inplace=False), ("input",), drop=("inplace",))
_FLATTEN = op_rule("flatten", signature("input", start_dim=0, end_dim=-1), ("input",))
_MAXPOOL = op_rule(
    "maxpool2d", signature("input", "kernel_size", stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False),
    ("input",), require={"return_indices": False},
)
_AVGPOOL = op_rule(
    "avgpool2d", signature("input", "kernel_size", stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None),
    ("input",),
)
_BATCH_NORM = op_rule(
    "batchnorm2d", signature("input", "running_mean", "running_var", weight=None, bias=None, training=False, momentum=0.1, eps=1e-5),
    ("input", "running_mean", "running_var", "weight", "bias"), drop=("momentum",), require={"training": False},
)

FUNCTIONS: dict[Any, Handler] = {
    F.relu: _RELU, torch.relu: _RELU, torch.relu_: _RELU,
    torch.flatten: _FLATTEN,
    F.max_pool2d: _MAXPOOL, torch.max_pool2d: _MAXPOOL,
    F.avg_pool2d: _AVGPOOL,
    F.adaptive_avg_pool2d: op_rule("adaptiveavgpool2d", signature("input", "output_size"), ("input",)),
    F.linear: op_rule("linear", signature("input", "weight", bias=None), ("input", "weight", "bias")),
    F.conv2d: op_rule("conv2d", signature("input", "weight", bias=None, stride=1, padding=0, dilation=1, groups=1), ("input", "weight", "bias")),
    F.batch_norm: _BATCH_NORM,
    torch.cat: _cat("dim"), torch.concat: _cat("dim"), torch.concatenate: _cat("axis"),
    operator.add: _add, operator.iadd: _add, torch.add: _add,
    torch.reshape: _reshape,
    F.dropout: _identity_unless_training, F.dropout1d: _identity_unless_training, F.dropout2d: _identity_unless_training,
    F.dropout3d: _identity_unless_training, F.alpha_dropout: _identity_unless_training, F.feature_alpha_dropout: _identity_unless_training,
    operator.getitem: _getitem,
    builtins.getattr: _getattr,
    **{f: _python_only(f) for f in PYTHON_OPERATORS if f not in (operator.add, operator.iadd, operator.getitem)},
}  # fmt: skip

METHODS: dict[str, Handler] = {
    "relu": op_rule("relu", signature("self"), ("self",)),
    "relu_": op_rule("relu", signature("self"), ("self",)),
    "flatten": op_rule("flatten", signature("self", start_dim=0, end_dim=-1), ("self",)),
    "view": _view,
    "reshape": _view,
    "size": _size,
    "dim": lambda lw, node: PythonCall(ndim_of, (node.args[0],)),
    "add": _add,
    "add_": _add,
    "contiguous": _method_alias,
    "detach": _method_alias,
}

