"""Graph nodes and the functions that build them: placeholders, parameters, op calls.

Shapes and dtypes are inferred while the graph is built, through each op's spec (``OpSpec.bind``);
a call the spec refuses raises a `GraphError` naming the node and every operand.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .._errors import AlgoswapError, OpArgumentError
from .._global import get_registry
from .._spec import OpCall, Shape

SOURCE_KINDS = ("placeholder", "parameter", "variable", "constant", "data")
STORED_KINDS = ("parameter", "variable", "constant")
_counter = itertools.count()
FLAT = "graph's nodes"  # the first entry of a pickled state holding nodes (``flat_state``)


class GraphError(AlgoswapError, ValueError):
    """A graph cannot be built, differentiated, planned or run; the message names the node and its op."""


@dataclass(frozen=True)
class Shaped:
    """An array known by its shape and dtype only: what planning computes with."""

    shape: Shape
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Pending:
    """A Python value (not an array) that PyTorch computes from data at each call (``x.max().item()``):
    unknown when planning. Every use of it raises ``TypeError``, so that nothing computed from it is
    taken as known; ``example`` is a value of its kind (computed from zeros), for inferring what a
    PyTorch call reading it returns."""

    __slots__ = ("example",)

    def __init__(self, example: Any) -> None:
        self.example = example

    def __repr__(self) -> str:
        return f"<a {type(self.example).__name__} PyTorch computes at each call>"

    def _unknown(self, *args: Any) -> Any:
        raise TypeError(f"{self!r} is not known when planning")

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __len__ = __iter__ = _unknown  # (and so unhashable)


def pending(value: Any) -> Any:
    """``value`` (computed from examples of pending values) with everything but its arrays (``Shaped``) pending."""
    return mapped(value, lambda v: v if isinstance(v, Shaped) else Pending(v))


def holds_pending(value: Any) -> bool:
    """Whether a pending value is inside ``value`` (its lists, tuples and dicts)."""
    return any(isinstance(v, Pending) for v in leaves(value))


def examples(value: Any) -> Any:
    """``value`` with each pending value replaced by its example."""
    return mapped(value, lambda v: v.example if isinstance(v, Pending) else v)


@dataclass
class Call:
    """What a node that is not a registry op runs: ``target`` called on ``args`` and ``kwargs``, whose
    ``Node`` items stand for those nodes' values. For a "torch" node ``target`` is a module, a function
    or a method name (called on the first argument) and ``reason`` says why no registry op serves it;
    for a "python" node it is a function of Python values (``x.size(0)``, shape arithmetic)."""

    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    label: str = ""
    reason: str = ""


@dataclass
class Origin:
    """Where an op node of an imported model came from: its module (if any), the torch call it
    lowers (its ``twin``, run in PyTorch where no implementation serves the node; None where it has
    none, e.g. a convolution with a batch norm folded in), the batch norms folded into it, and the
    constant scales folded into its weights (a linear's layer scale)."""

    module: str | None
    label: str
    twin: Call | None = None
    folded: tuple[str, ...] = ()
    scaled: tuple[str, ...] = ()


@dataclass(eq=False)
class Node:
    """One value of a graph: a source (placeholder, parameter, variable, constant, data) or an op call.

    ``shape`` and ``dtype`` are known when the node is built. Parameters, variables (optimizer
    state) and constants hold their host array in ``value``; in-place updates change it.
    ``priority`` orders the steps ready to run (lower first; data-parallel training starts gradient
    reductions as soon as it can, -1, and waits for them as late as it can, 1); ``setup`` runs once per
    Executor before the first run that reaches the node (data-parallel training's first broadcast). An
    Executor may keep a parameter or variable in a device's memory between runs (where the op
    updating it runs): reading ``value`` brings that copy home first, and setting it replaces both.
    """

    name: str
    kind: str
    shape: Shape
    dtype: str
    op: str | None = None
    inputs: tuple[Node | None, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    call: OpCall | None = None
    host: Any = field(default=None, repr=False)
    request: str = "default"
    dynamic: Callable[[], dict[str, Any]] | None = None
    loaders: Any = None
    component: int = 0
    holder: Any = field(default=None, repr=False)  # the Executor residence keeping a device copy, if any
    source: Call | Origin | None = None  # a "torch" or "python" node's call; an imported op node's origin
    needs: tuple[Node, ...] = ()  # nodes whose Python values the attributes need (an imported reshape's sizes)
    priority: int = 0  # among the steps ready to run, lower first (then graph order): see ``_plan.schedule``
    setup: Callable[[], None] | None = field(default=None, repr=False)  # run once per Executor, before its first run

    @property
    def value(self) -> Any:
        """The host array of a parameter, variable or constant (a device copy newer than it is copied in first)."""
        if self.holder is not None:
            holder, self.holder = self.holder, None
            holder.bring_home(self)
        return self.host

    @value.setter
    def value(self, array: Any) -> None:
        if self.holder is not None:
            holder, self.holder = self.holder, None
            holder.forget(self)
        self.host = array

    def __getstate__(self) -> dict[str, Any]:
        self.value  # a newer device copy comes home first
        state = dict(self.__dict__)
        return state

    def __repr__(self) -> str:
        what = self.op if self.kind == "op" else self.kind
        return f"<Node {self.name}: {what} {self.shape} {self.dtype}>"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __add__(self, other: Any) -> Node:
        return _arith("add", "add_scalar", self, other)

    def __radd__(self, other: Any) -> Node:
        return _arith("add", "add_scalar", self, other)

    def __sub__(self, other: Any) -> Node:
        if _is_scalar(other):
            return op("add_scalar", self, value=-float(other))
        return op("sub", self, other)

    def __mul__(self, other: Any) -> Node:
        return _arith("mul", "mul_scalar", self, other)

    def __rmul__(self, other: Any) -> Node:
        return _arith("mul", "mul_scalar", self, other)

    def __truediv__(self, other: Any) -> Node:
        if _is_scalar(other):
            return op("mul_scalar", self, value=1.0 / float(other))
        return op("div", self, other)

    def __neg__(self) -> Node:
        return op("neg", self)

    def __matmul__(self, other: Node) -> Node:
        return op("matmul", self, other)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _arith(binary: str, scalar: str, node: Node, other: Any) -> Node:
    if _is_scalar(other):
        return op(scalar, node, value=float(other))
    return op(binary, node, other)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{next(_counter)}"


def placeholder(name: str, shape: Sequence[int], dtype: str = "float32") -> Node:
    """An input fed at run time (``executor.run(..., feed={node: array})``)."""
    return Node(name, "placeholder", tuple(int(s) for s in shape), str(np.dtype(dtype)))


def parameter(name: str, value: Any, dtype: str | None = None) -> Node:
    """A trainable array, updated in place by optimizers (kept on the host, or in the device memory
    where its update runs: see ``Node.value``)."""
    array = _owned_array(value, "parameter", dtype)
    return Node(name, "parameter", tuple(array.shape), str(array.dtype), host=array)


def variable(name: str, value: Any) -> Node:
    """A non-trainable array the graph updates in place (optimizer state)."""
    array = _owned_array(value, "variable")
    return Node(name, "variable", tuple(array.shape), str(array.dtype), host=array)


def constant(value: Any, name: str | None = None) -> Node:
    """A fixed array (numpy arrays given to op calls become constants), copied: changing the array
    given afterwards does not change the graph."""
    array = _owned_array(value, "constant")
    return Node(name or unique_name("constant"), "constant", tuple(array.shape), str(array.dtype), host=array)


def _owned_array(value: Any, kind: str, dtype: str | None = None) -> np.ndarray:
    """A C-contiguous copy of ``value`` (its shape kept, 0-D too), or an OpArgumentError naming the
    graph function for what is not an array of numbers (a str, a dict, a ragged list)."""
    from .._inputs import host_array

    array = host_array(value, f"graph.{kind}", lambda: "value")
    return np.array(array, dtype=dtype or array.dtype, order="C", copy=True)


def _as_node(value: Any) -> Node | None:
    if value is None or isinstance(value, Node):
        return value
    return constant(value)


def _operands(op_name: str, inputs: tuple[Node | None, ...]) -> str:
    spec = get_registry().spec(op_name)
    names = spec.flat_input_names(max(len(inputs), len(spec.inputs)))
    return ", ".join(f"{n}={'None' if i is None else f'{i.name} {i.shape} {i.dtype}'}" for n, i in zip(names, inputs))


def op(op_name: str, *inputs: Any, name: str | None = None, algorithm: str = "default", **attrs: Any) -> Node:
    """A node calling the registered op ``op_name`` on ``inputs`` (nodes, arrays or None).

    ``algorithm`` is a request as in the swap API ("default", "smm", "numpy:smm"); the executor's
    own ``algorithms`` override it. Raises `GraphError` naming the node and its operands when the
    op's spec refuses the call.
    """
    registry = get_registry()
    if op_name not in registry.ops:
        raise GraphError(f"no op named {op_name!r}; registered ops: {', '.join(sorted(registry.ops))}")
    nodes = tuple(_as_node(i) for i in inputs)
    label = name or unique_name(op_name)
    spec = registry.spec(op_name)
    try:
        call = spec.bind([None if n is None else n.shape for n in nodes], [None if n is None else n.dtype for n in nodes], attrs)
    except OpArgumentError as exc:
        raise GraphError(f"node {label!r} ({op_name}): {exc}; operands: {_operands(op_name, nodes)}") from None
    nodes += (None,) * (len(call.input_names) - len(nodes))  # absent optional inputs, passed as None
    return Node(label, "op", call.out_shape, call.out_dtype, op_name, nodes, dict(call.attrs), call, request=algorithm)


def group(nodes: Sequence[Node], name: str | None = None) -> Node:
    """A node that runs ``nodes`` (updates) and has no value itself: what ``optimizer.minimize`` returns."""
    return Node(name or unique_name("group"), "group", (), "none", inputs=tuple(nodes))


def rebuilt(value: Any, function: Callable[[Any], Any]) -> Any:
    """A list, tuple or dict like ``value`` holding ``function`` of each of its items (values of a dict),
    of ``value``'s own type: a named tuple (``collections.namedtuple``, torch's ``torch.return_types.max``)
    keeps its fields, an ``OrderedDict`` its order. Anything else is returned as it is."""
    kind = type(value)
    if kind is tuple or kind is list:
        return kind(function(v) for v in value)
    if isinstance(value, (list, tuple)):
        items = [function(v) for v in value]
        return kind(*items) if hasattr(value, "_fields") else kind(items)  # a namedtuple takes fields; torch's structseqs a sequence
    if isinstance(value, dict):
        if kind is dict:
            return {k: function(v) for k, v in value.items()}
        copied = copy.copy(value)  # a dict subclass (OrderedDict, defaultdict) keeps its type and settings
        copied.update((k, function(v)) for k, v in value.items())
        return copied
    return value


def mapped(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with ``leaf`` applied to everything inside its lists, tuples and dicts (each of its own type: see ``rebuilt``)."""
    if isinstance(value, (list, tuple, dict)):
        return rebuilt(value, lambda v: mapped(v, leaf))
    return leaf(value)


def with_values(value: Any, values: dict[int, Any]) -> Any:
    """``value`` with each node inside it replaced by ``values[id(node)]``."""
    return mapped(value, lambda v: values[id(v)] if isinstance(v, Node) else v)


def leaves(value: Any) -> list[Any]:
    """Everything inside ``value``'s lists, tuples and dicts, in order (nothing rebuilt: a tuple type that
    takes only numbers, torch.Size, is read as it is)."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (list, tuple)):
        return [value]
    return [leaf for item in value for leaf in leaves(item)]


def nodes_in(value: Any) -> list[Node]:
    """The distinct nodes inside ``value`` (through lists, tuples, dicts), in order."""
    found: list[Node] = []
    for item in leaves(value):
        if isinstance(item, Node) and all(item is not f for f in found):
            found.append(item)
    return found


def dependencies(node: Node) -> tuple[Node | None, ...]:
    """The nodes whose values ``node`` needs to run: its inputs, then those its attributes or call need."""
    return node.inputs + node.needs if node.needs else node.inputs


def references(node: Node) -> list[Node]:
    """Every node ``node`` holds: its dependencies and those inside its attributes, its call and its torch twin."""
    source = node.source.twin if isinstance(node.source, Origin) else node.source
    call = () if source is None else (source.args, source.kwargs)
    return nodes_in((node.inputs, node.needs, node.attrs, call))


def topological(outputs: Sequence[Node], follow: Callable[[Node], Sequence[Node | None]] = dependencies) -> list[Node]:
    """Every node the outputs depend on, each after its dependencies (depth-first, without recursion);
    ``follow=references``: every node they hold, each after the nodes it holds."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        stack: list[tuple[Node, Sequence[Node | None], int]] = [(root, follow(root), 0)]
        while stack:
            node, deps, index = stack.pop()
            if index == 0 and id(node) in seen:
                continue
            if index < len(deps):
                stack.append((node, deps, index + 1))
                child = deps[index]
                if child is not None and id(child) not in seen:
                    stack.append((child, follow(child), 0))
            else:
                seen.add(id(node))
                order.append(node)
    return order


def flat_state(state: dict[str, Any], roots: Sequence[Node]) -> dict[str, Any]:
    """An object's pickled ``state`` with, as its first entry, every node reachable from ``roots``, each after
    the nodes it holds. pickle and ``copy.deepcopy`` save a state's entries in order and each object once, so
    whatever a node holds is saved already when they reach it: neither recurses along the graph's depth (a
    node pickled on its own recurses through its inputs). ``unflat_state`` takes the entry out again."""
    return {FLAT: topological(roots, references), **state}


def unflat_state(state: dict[str, Any]) -> dict[str, Any]:
    """The object's own state, from what ``flat_state`` made (or from a state pickled without it)."""
    return {key: value for key, value in state.items() if key != FLAT}


def parameters_of(outputs: Sequence[Node]) -> list[Node]:
    """The parameter nodes the outputs depend on, in graph order."""
    return [n for n in topological(outputs) if n.kind == "parameter"]
