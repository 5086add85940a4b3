"""The node table of ``swap_backend``: which registry op (if any) runs each node of a traced model.

``Lowerer.lower(node)`` turns one ``torch.fx`` node into one of the kinds of ``lowered.py``, or
raises ``Unsupported(reason)``. The rules live by responsibility: ``lower_python`` (Python values,
sizes and shape guards), ``lower_elementwise`` (arithmetic, activations, softmax, dropouts),
``lower_shapes`` (views, permutations, indexing, splitting, padding), ``lower_linalg`` (linear,
convolutions, pools, normalisations, reductions, matrix products, attention), ``lower_modules``
(``nn.Module`` calls) and ``lower_torchvision`` (torchvision's fx-wrapped functions, by name).
Before any rule, a node computed from weights and literals alone (``torch.arange(16)`` too) is folded into a constant
(``Constant``); in-place ops were rewritten before lowering (``lower_in_place``).
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, Iterator

import torch
from torch import fx

from .._errors import OpArgumentError
from .._global import get_registry
from ..graph._node import leaves
from . import lower_elementwise, lower_linalg, lower_modules, lower_python, lower_shapes, lower_torchvision
from .lower_in_place import mutates
from .tracing import EXPORTED_FROM
from .lowered import (Alias, Constant, Deferred, Handler, Lowered, LoweredOp, Parts, PythonCall, Unsupported,
                      contains_node, describe, fx_nodes, signature, target_name)

FUNCTIONS: dict[Any, Handler] = {
    **lower_python.FUNCTIONS, **lower_elementwise.FUNCTIONS, **lower_shapes.FUNCTIONS, **lower_linalg.FUNCTIONS,
}
METHODS: dict[str, Handler] = {
    **lower_python.METHODS, **lower_elementwise.METHODS, **lower_shapes.METHODS, **lower_linalg.METHODS,
}
NAMED: dict[str, Handler] = {**lower_torchvision.NAMED}  # functions of libraries not imported here, by qualified name

_RANDOM = {"rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "normal",
           "multinomial", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "feature_alpha_dropout", "rrelu", "gumbel_softmax",
           "empty", "empty_like", "empty_strided", "new_empty"}  # functions and methods never folded into constants


class Lowerer:
    """Lowers the nodes of one traced model, in graph order (it remembers what each node was lowered to)."""

    def __init__(self, root: fx.GraphModule, dtype: torch.dtype = torch.float32) -> None:
        self.root = root
        self.dtype = dtype  # the compute dtype: every floating tensor of the Model has it
        self.python_nodes: set[fx.Node] = set()
        self.tensor_nodes: set[fx.Node] = set()
        self.constants: dict[fx.Node, Any] = {}  # get_attr nodes and folded nodes: their values
        self.results: dict[fx.Node, Lowered] = {}

    # ------------------------------------------------------------------ lowering

    def lower(self, node: fx.Node) -> Lowered:
        folded = self._fold(node)
        lowered = folded if folded is not None else self._dispatch(node)
        items = [lowered.item(index) for index in _indices_read(node, lowered.fields)] if isinstance(lowered, Parts) else [lowered]
        for op in _ops_in(items):  # a tuple whose read items cannot all be lowered is left to PyTorch whole
            self._validate(op)
        self.results[node] = lowered
        if isinstance(lowered, PythonCall) and lowered.python_result or isinstance(lowered, Constant) and self.is_python(lowered.value):
            self.python_nodes.add(node)
        elif isinstance(lowered, (LoweredOp, Constant)) or (isinstance(lowered, Alias) and self.is_tensor(lowered.source)):
            self.tensor_nodes.add(node)
        if isinstance(lowered, Constant):
            self.constants[node] = lowered.value
        return lowered

    def _dispatch(self, node: fx.Node) -> Lowered:
        if node.op == "call_module":
            return lower_modules.lower_module(self, node, self.root.get_submodule(str(node.target)))
        if node.op == "call_function":
            handler = FUNCTIONS.get(node.target) if _hashable(node.target) else None
            handler = handler or NAMED.get(_qualified(node.target))
            if handler is not None:
                return handler(self, node)
        if node.op == "call_method" and node.target in METHODS:
            return METHODS[str(node.target)](self, node)
        raise Unsupported(_no_op(node))

    def _fold(self, node: fx.Node) -> Constant | None:
        """The node's value if it is computed from weights and literals alone (not randomly): a call, or a
        module (in eval mode) called on weights (Swin V2's position-bias MLP). An in-place call changes a
        copy: the weights stay as they are, and the readers of the changed value read this node."""
        random = node.op != "call_module" and _base_name(node.target) in _RANDOM
        if node.op not in ("call_function", "call_method", "call_module") or random:
            return None
        inputs = fx_nodes(node.args, node.kwargs)
        if not all(n in self.constants for n in inputs):
            return None
        if inputs and not any(_holds_tensor(self.constants[n]) for n in inputs):  # a tensor, or torch's named tuple of them
            return None
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: self.constants[n])
        if mutates(node, self.root):
            args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        if node.op == "call_method":
            function: Any = getattr(args[0], str(node.target))
            args = args[1:]
        else:
            function = self.root.get_submodule(str(node.target)) if node.op == "call_module" else node.target
        try:
            with torch.no_grad():
                value = function(*args, **kwargs)
        except Exception:
            return None  # left to the rules (and, if none applies, to PyTorch at run time)
        if not inputs and not _holds_tensor(value):
            return None  # a Python value of literals (``int(2.5)``): the rules say what it is
        return Constant(value.detach() if isinstance(value, torch.Tensor) else value)

    def _validate(self, lowered: LoweredOp) -> None:
        """An op the registry lacks, or attributes it refuses (known now), make the node unsupported."""
        if lowered.op not in get_registry().ops:
            raise Unsupported(f"the op {lowered.op!r} it lowers to is not registered")
        if not contains_node(lowered.attrs):  # attributes computed in forward are checked at each call instead
            try:
                get_registry().spec(lowered.op).canonical_attrs(lowered.attrs)
            except OpArgumentError as exc:
                raise Unsupported(str(exc)) from None

    # ------------------------------------------------------------------ what the rules ask

    @property
    def sizes_fixed(self) -> bool:
        """Whether the sample run's sizes are every input's (torch.export's capture: a guard refuses others)."""
        return EXPORTED_FROM in self.root.meta

    def is_python(self, value: Any) -> bool:
        """Whether ``value`` is a Python value (a literal, or a node computing sizes), not a tensor."""
        if isinstance(value, fx.Node):
            if value in self.constants:
                return not isinstance(self.constants[value], torch.Tensor)
            if isinstance(self.results.get(value), Parts):
                return False
            known = value.meta.get("type")  # recorded by shape propagation, when it ran
            return value in self.python_nodes if known is None else not issubclass(known, torch.Tensor)
        return not isinstance(value, (torch.Tensor, LoweredOp))

    def is_tensor(self, value: Any) -> bool:
        """Whether ``value`` is known to be a tensor (a fallback node's output may be anything)."""
        if not isinstance(value, fx.Node):
            return isinstance(value, (torch.Tensor, LoweredOp))
        if value in self.constants:
            return isinstance(self.constants[value], torch.Tensor)
        known = value.meta.get("type")
        return value in self.tensor_nodes if known is None else issubclass(known, torch.Tensor)

    def shape(self, value: Any) -> tuple[int, ...] | None:
        """The shape of a tensor operand where it is known now (a weight, or the sample run's), else None."""
        if isinstance(value, torch.Tensor):
            return tuple(value.shape)
        if isinstance(value, fx.Node):
            constant = self.constants.get(value)
            if isinstance(constant, torch.Tensor):
                return tuple(constant.shape)
            shape = getattr(value.meta.get("tensor_meta"), "shape", None)
            if shape is not None:
                return tuple(int(s) for s in shape)
        return None

    def rank(self, value: Any, what: str) -> int:
        """The rank of a tensor operand, which ``what`` needs to choose its ops; unsupported when unknown."""
        shape = self.shape(value)
        if shape is None:
            raise Unsupported(f"{what} depends on the operands' ranks, known only with a sample_input_shape")
        return len(shape)

    def bind(self, sig: Any, node: fx.Node) -> dict[str, Any]:
        try:
            bound = sig.bind(*node.args, **node.kwargs)
        except TypeError as exc:
            raise Unsupported(f"arguments not understood ({exc})") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def check_users_index(self, node: fx.Node, fields: tuple[str, ...] = ()) -> None:
        """A tuple-valued node (``Parts``) is lowered only where every reader takes one item, by a literal
        index or by one of its ``fields`` (``.values``)."""
        for user in node.users:
            if item_read(user, fields) is None:
                raise Unsupported(f"its tuple is used as a whole by {user.name!r}; only taking its items by index is lowered")


def _ops_in(lowered: Any) -> Iterator[LoweredOp]:
    """Every ``LoweredOp`` in a lowering (its inputs and deferred attributes included), each once: the ops of one
    node share inputs (an unrolled LSTM's cell state feeds two steps' ops), a tree walk would be exponential."""
    stack: list[Any] = [lowered]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, (LoweredOp, Deferred)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, LoweredOp):
            yield item
            stack.extend(item.inputs)
            stack.extend(item.attrs.values())
        elif isinstance(item, Deferred):
            stack.extend(item.args)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def item_read(user: fx.Node, fields: tuple[str, ...]) -> int | None:
    """The index of the item ``user`` takes from a tuple-valued node (``t[1]``, or ``t.indices`` where
    ``fields`` names it); None if it reads something else."""
    if user.op != "call_function" or len(user.args) != 2:
        return None
    key = user.args[1]
    if user.target is operator.getitem and isinstance(key, int):
        return key
    if user.target is builtins.getattr and key in fields:
        return fields.index(str(key))
    return None


def _indices_read(node: fx.Node, fields: tuple[str, ...]) -> list[int]:
    """The items its readers take from a tuple-valued node (``check_users_index`` made sure each takes one)."""
    return [index for user in node.users if (index := item_read(user, fields)) is not None]


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in leaves(value))


def _base_name(target: Any) -> str:
    """The function's name without its module: "randn" for torch.randn, Tensor.randn_ and ATen's randn.default."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target._opname)
    return target_name(target).rpartition(".")[2]


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True


def _qualified(target: Any) -> str:
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"


def _no_op(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"no registry op runs Tensor.{node.target}"
    return f"no registry op runs {target_name(node.target)}"


__all__ = ["Alias", "Constant", "Deferred", "Lowered", "LoweredOp", "Lowerer", "Parts", "PythonCall", "Unsupported",
           "describe", "signature", "target_name"]
