"""From a traced model to the graph a Model runs: lower every node, fold batch norms and layer scales, turn
weights into frozen numpy arrays once, and make the nodes no registry op serves torch nodes.

A node lowered to several ops (``x[:, 0]``: a slice, then a reshape) gives one graph node per op,
the inner ones named ``<node>.<op>``; sizes computed when planning (``Deferred``) become python
nodes named ``<node>.<function>``."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import fx, nn
from torch.fx.immutable_collections import immutable_dict, immutable_list

from .._frozen import freeze
from .._global import get_registry
from .._requests import IN_TORCH
from .._runner import numpy_dtype
from ..graph._node import Call, Node, Origin, nodes_in, rebuilt
from .custom import SWAPPED_WITH, CustomLayer
from .errors import ConversionError, UnsupportedModelError, UnsupportedNode
from .explain import KEPT_NOTE
from .fold_scale import find_layer_scale, scale_linear
from .lower_in_place import rewrite_in_place
from .lowered import Alias, Constant, Deferred, Lowered, LoweredOp, PythonCall, Unsupported, describe, fx_nodes, target_name
from .lower_python import SHAPE_READERS
from .bridge import COMPUTE_DTYPES
from .lowering import Lowerer
from .modules import own_request, plain
from .tracing import EXPORTED_FROM
from .tensors import NamedFunction


@dataclass(frozen=True)
class Kept:
    """A node the selector left in PyTorch ("torch"): the op it would have run, and why it runs in torch."""

    op: str
    note: str = KEPT_NOTE


@dataclass(frozen=True)
class FunctionalCall:
    """What a function selector receives for a node that calls no module (``F.relu``, ``torch.cat``,
    ``x.view``, ``+``): the fx node name, the fx target (the function, or the method name), the op
    and its attributes as written in the model (``call.attrs["kernel_size"]``, or ``call.kernel_size``)."""

    name: str
    target: Any
    op: str
    attrs: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "attrs":
            raise AttributeError(name)
        try:
            return self.attrs[name]
        except KeyError:
            raise AttributeError(f"{self.op} call {self.name!r} has no attribute {name!r}") from None


@dataclass
class ModelGraph:
    """The graph of a converted model and what conversion needs to choose requests."""

    inputs: list[Node]
    input_names: list[str]
    output: Any
    nodes: list[Node]
    unsupported: list[UnsupportedNode]
    subjects: dict[str, Any] = field(default_factory=dict)  # op node name -> its module or FunctionalCall
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # op node name -> its first input's shape
    guards: list[Node] = field(default_factory=list)  # python nodes checking input shapes, planned with the outputs


class ModelBuilder:
    """Builds the graph of one traced model, computing in ``dtype`` (a name of ``COMPUTE_DTYPES``).
    The fx nodes named in ``in_torch`` (and the batch norms that would be folded into them) become
    torch nodes: the selector left them in PyTorch."""

    def __init__(self, caller: str, traced: fx.GraphModule, dtype: str, fallback: bool, in_torch: frozenset[str] = frozenset()) -> None:
        self.caller, self.traced, self.dtype, self.fallback = caller, traced, dtype, fallback
        self.in_torch = {name: KEPT_NOTE for name in in_torch}  # fx node name -> why it stays in torch
        self.lowerer = Lowerer(traced, COMPUTE_DTYPES[dtype])
        self.lowered: dict[fx.Node, Lowered | UnsupportedNode | Kept] = {}
        self.node_of: dict[fx.Node, Node] = {}
        self.literals: dict[fx.Node, Any] = {}
        self.consts: dict[int, Node] = {}
        self.keep_alive: list[torch.Tensor] = []
        self.fallback_modules: dict[int, nn.Module] = {}
        self.made: dict[int, Node] = {}  # id(LoweredOp or Deferred) -> its graph node
        self.names: set[str] = set()
        self.emitting: fx.Node | None = None
        self.graph = ModelGraph([], [], None, [], [])

    def build(self) -> ModelGraph:
        rewrite_in_place(self.traced.graph, self.traced, self.caller)
        nodes = list(self.traced.graph.nodes)
        for node in nodes:
            self._lower(node)
        unsupported = [entry for entry in self.lowered.values() if isinstance(entry, UnsupportedNode)]
        if unsupported and not self.fallback:
            raise UnsupportedModelError(self.caller, unsupported)
        for node in nodes:
            entry = self.lowered.get(node)
            if isinstance(entry, LoweredOp) and entry.op == "batchnorm2d":
                self._fold(node, entry)
            elif isinstance(entry, LoweredOp) and entry.op == "mul":
                self._fold_scale(node, entry)
        for node in nodes:
            entry = self.lowered.get(node)
            if node.name in self.in_torch and isinstance(entry, LoweredOp):
                self.lowered[node] = Kept(entry.op, self.in_torch[node.name])
        for node in nodes:
            self._emit(node)
        self.graph.unsupported = unsupported
        return self.graph

    # --------------------------------------------------------------- lowering and folding

    def _lower(self, node: fx.Node) -> None:
        if node.op == "placeholder" and node.args:  # an argument of forward with a default: traced with it
            self.lowerer.constants[node] = node.args[0]
        elif node.op == "placeholder":
            self.lowerer.tensor_nodes.add(node)
        elif node.op == "get_attr":
            self.lowerer.constants[node] = self._attr(node)
        elif (custom := self._swapped_with(node)) is not None:
            self.lowered[node] = Kept(custom.op, f"swap_with={custom.cls.rpartition('.')[2]} runs it, as written")
        elif node.op != "output":
            try:
                self.lowered[node] = self.lowerer.lower(node)
            except Unsupported as exc:
                self.lowered[node] = UnsupportedNode(node.name, describe(self.traced, node), str(exc))

    def _swapped_with(self, node: fx.Node) -> CustomLayer | None:
        """What a ``swap_with`` class made of the layer this node calls (it stays in PyTorch), None for other nodes."""
        module = self.traced.get_submodule(str(node.target)) if node.op == "call_module" else None
        return None if module is None else module.__dict__.get(SWAPPED_WITH)

    def _fold(self, node: fx.Node, bn: LoweredOp) -> None:
        """Fold an inference batch norm into the conv2d whose output feeds only it (and reads of its
        shape: timm checks ``x.ndim`` first)."""
        source = bn.inputs[0]
        conv = self.lowered.get(source) if isinstance(source, fx.Node) else None
        if not isinstance(conv, LoweredOp) or conv.op != "conv2d" or any(u is not node and not self._reads_shape(u) for u in source.users):
            return
        weight, bias, mean, var, gamma, beta = (self.lowerer.constants.get(t, t) if isinstance(t, fx.Node) else t
                                                for t in (*conv.inputs[1:3], *bn.inputs[1:]))  # torch.export's are get_attr nodes
        if not all(t is None or isinstance(t, torch.Tensor) for t in (weight, bias, mean, var, gamma, beta)) or weight is None:
            return  # weights computed in forward: leave the batch norm as an op
        if source.name in self.in_torch:
            self.in_torch[node.name] = f"{KEPT_NOTE} with {source.name!r}, the convolution it would be folded into"
            return
        with torch.no_grad():
            scale = 1.0 / torch.sqrt(var.double() + bn.attrs["eps"])
            scale = scale * gamma.double() if gamma is not None else scale
            shift = -mean.double() * scale + (beta.double() if beta is not None else 0.0)
            folded_bias = shift if bias is None else bias.double() * scale + shift
            conv.inputs[1:3] = [weight.double() * scale.reshape(-1, 1, 1, 1), folded_bias]
        conv.folded += [str(node.target) if node.op == "call_module" else node.name]
        self.lowered[node] = Alias(source)

    def _fold_scale(self, node: fx.Node, mul: LoweredOp) -> None:
        """Fold a constant per-feature scale into the linear (perhaps permuted) whose output feeds only it:
        ConvNeXt's layer scale (fold_scale.py)."""
        found = find_layer_scale(mul, self.lowered, self.lowerer.constants, self._sole_reader, self._rank)
        if found is None or not self._sole_reader(found.source, node):
            return
        if any(n.name in self.in_torch for n in (node, found.source, found.linear_node)):
            return  # the selector left one of them in PyTorch: nothing is folded
        scale_linear(found, self.lowerer.constants)
        found.linear.scaled += [node.name]
        self.lowered[node] = Alias(found.source)

    def _sole_reader(self, value: fx.Node, reader: fx.Node) -> bool:
        """Whether ``reader`` is the only node using ``value`` (reads of its shape aside)."""
        return all(u is reader or self._reads_shape(u) for u in value.users)

    def _rank(self, value: fx.Node) -> int | None:
        shape = self.lowerer.shape(value)
        return None if shape is None else len(shape)

    def _reads_shape(self, node: fx.Node) -> bool:
        entry = self.lowered.get(node)
        return isinstance(entry, PythonCall) and entry.function in SHAPE_READERS

    # --------------------------------------------------------------- emitting nodes

    def _emit(self, node: fx.Node) -> None:
        entry = self.lowered.get(node)
        self.emitting = node
        if node.op == "placeholder" and node.args:
            self.literals[node] = node.args[0]
        elif node.op == "placeholder":
            self.node_of[node] = placeholder = Node(str(node.target), "placeholder", (), "")
            self.graph.inputs.append(placeholder)
            self.graph.input_names.append(str(node.target))
        elif node.op == "get_attr":
            self._constant(node, self._attr(node), str(node.target))
        elif node.op == "output":
            self.graph.output = self._ref(node.args[0])
        elif isinstance(entry, Alias):
            ref = self._ref(entry.source)
            if isinstance(ref, Node):
                self.node_of[node] = ref
            else:
                self.literals[node] = ref
        elif isinstance(entry, LoweredOp):
            self.node_of[node] = self._op_node(entry, node)
        elif isinstance(entry, PythonCall):
            python = self._add(node, Node(node.name, "python", (), "", source=Call(entry.function, self._ref(entry.args), {})))
            if entry.guard:
                self.graph.guards.append(python)
        elif isinstance(entry, Constant):
            self._constant(node, entry.value, node.name)
        elif isinstance(entry, UnsupportedNode):
            self._add(node, Node(node.name, "torch", (), "", source=self._torch_call(node, entry.target, entry.reason)))
        elif isinstance(entry, Kept):
            call = self._torch_call(node, describe(self.traced, node), entry.note)
            self._add(node, Node(node.name, "torch", (), "", entry.op, request=IN_TORCH, source=call))
        # Parts: nothing; the getitem nodes reading it lower its items

    def _constant(self, node: fx.Node, value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            self.node_of[node] = self._const(value, name)
        else:
            self.literals[node] = self._ref(value)  # the tensors of a named tuple as constants too

    def _op_node(self, lowered: LoweredOp, node: fx.Node | None = None) -> Node:
        """The graph node of an op (made once): ``node`` is the fx node it lowers; None for the inner ops
        of a node lowered to several, made first."""
        if id(lowered) in self.made:
            return self.made[id(lowered)]
        owner = self.emitting
        assert owner is not None
        name = node.name if node is not None else self._name(f"{owner.name}.{lowered.op}")
        module, layer = (str(owner.target), lowered.module) if owner.op == "call_module" else self._layer(owner)
        layer = lowered.module if lowered.module is not None else layer
        request = own_request(layer)  # a layer swapped before keeps its choice
        label = describe(self.traced, owner)
        changed = lowered.folded or lowered.scaled  # its weights are no longer the module's: no torch twin
        twin = None if node is None or changed or not self._runnable(node) else self._torch_call(node, label)
        names = [f"{module or name}.{n}" for n in get_registry().spec(lowered.op).flat_input_names(len(lowered.inputs))]
        inputs = tuple(self._input(v, n) for v, n in zip(lowered.inputs, names))
        op = Node(name, "op", (), "", lowered.op, inputs, self._ref(lowered.attrs), request=str(request),
                  source=Origin(module if node is not None else None, label, twin, tuple(lowered.folded), tuple(lowered.scaled)))
        target = node.target if node is not None else owner.target
        self.graph.subjects[name] = layer if layer is not None else FunctionalCall(name, target, lowered.op, dict(lowered.attrs))
        first = lowered.inputs[0] if lowered.inputs else None
        shape = getattr(first.meta.get("tensor_meta"), "shape", None) if isinstance(first, fx.Node) else None
        if shape is not None:  # known after shape propagation (a sample input)
            self.graph.input_shapes[name] = tuple(int(s) for s in shape)
        self.made[id(lowered)] = self._append(op)
        return op

    def _layer(self, node: fx.Node) -> tuple[str | None, nn.Module | None]:
        """The layer (a module without children: nn.Conv2d, nn.Linear) whose forward made a node of torch.export's
        graph, by its name in the model, and the layer; (None, None) for other nodes."""
        root, stack = self.traced.meta.get(EXPORTED_FROM), node.meta.get("nn_module_stack")
        if root is None or not stack:
            return None, None
        path = str(list(stack.values())[-1][0])
        try:
            layer = root.get_submodule(path)
        except AttributeError:  # a path export made up (a region it wrapped): no layer of the model
            return None, None
        return (path, layer) if path and not any(True for _ in layer.children()) else (None, None)

    def _python_node(self, value: Deferred) -> Node:
        """A value computed when planning, as a python node (made once)."""
        if id(value) not in self.made:
            owner = self.emitting
            assert owner is not None
            name = self._name(f"{owner.name}.{getattr(value.function, '__name__', 'python')}")
            self.made[id(value)] = self._append(Node(name, "python", (), "", source=Call(value.function, self._ref(value.args), {})))
        return self.made[id(value)]

    def _name(self, wanted: str) -> str:
        name, count = wanted, 1
        while name in self.names:
            name, count = f"{wanted}_{count}", count + 1
        self.names.add(name)
        return name

    def _runnable(self, node: fx.Node) -> bool:
        """Whether PyTorch can run the node in its place (its twin): it holds no weights of its own and
        every value it reads is made (not an item of a tuple only its readers lower)."""
        made = all(n in self.node_of or n in self.literals for n in fx_nodes(node.args, node.kwargs))
        return made and _parameterless(node, self.traced)

    def _torch_call(self, node: fx.Node, label: str, reason: str = "") -> Call:
        target: Any = node.target
        if node.op == "call_module":
            target = self._fallback_module(self.traced.get_submodule(str(node.target)))
        elif node.op == "call_function":
            target = _picklable(target)
        return Call(target, self._ref(tuple(node.args)), self._ref(dict(node.kwargs)), label, reason)

    def _fallback_module(self, module: nn.Module) -> nn.Module:
        """A copy of the module in the compute dtype (converted once, however often it is called)."""
        if id(module) not in self.fallback_modules:
            self.fallback_modules[id(module)] = copy.deepcopy(plain(module)).to(COMPUTE_DTYPES[self.dtype]).eval()
        return self.fallback_modules[id(module)]

    def _add(self, fx_node: fx.Node, node: Node) -> Node:
        self.node_of[fx_node] = self._append(node)
        return node

    def _append(self, node: Node) -> Node:
        node.needs = tuple(nodes_in((node.source.args, node.source.kwargs) if isinstance(node.source, Call) else node.attrs))
        self.graph.nodes.append(node)
        return node

    # --------------------------------------------------------------- constants

    def _const(self, tensor: torch.Tensor, name: str) -> Node:
        """A weight as a constant node holding a frozen (``algoswap.freeze``), contiguous numpy array in
        the compute dtype (made once): floating weights rounded once to it (batch norms are folded
        in float64, then rounded).

        Always a copy that nothing can write: the Model owns its weights, so training the torch model
        afterwards changes neither its results nor what backends derive from them and keep (reordered
        weights, device copies: backends may cache those for frozen arrays only)."""
        if id(tensor) in self.consts:
            return self.consts[id(tensor)]
        data = tensor.detach().cpu()
        if data.is_floating_point():  # exactly in float32 or float64 (numpy holds them), then rounded once
            wide = data.to(torch.float64 if data.dtype == torch.float64 else torch.float32).numpy()
            array = freeze(wide.astype(numpy_dtype(self.dtype), copy=False))
        else:
            array = freeze(data.numpy())
        node = self.consts[id(tensor)] = Node(name, "constant", tuple(array.shape), str(array.dtype), host=array)
        self.keep_alive.append(tensor)  # ids stay unique while building
        return node

    def _input(self, value: Any, name: str) -> Node | None:
        if value is None:
            return None
        if isinstance(value, torch.Tensor):
            return self._const(value, name)
        if isinstance(value, LoweredOp):
            return self._op_node(value)
        if isinstance(value, fx.Node) and value in self.node_of:
            return self.node_of[value]
        raise ConversionError(f"{self.caller}: an op input is not a tensor: {value!r}")

    def _ref(self, value: Any) -> Any:
        """``value`` with fx nodes replaced by graph nodes (or Python values) and tensors by constants."""
        if isinstance(value, fx.Node):
            return self.literals[value] if value in self.literals else self.node_of[value]
        if isinstance(value, torch.Tensor):
            return self._const(value, f"constant_{len(self.consts)}")
        if isinstance(value, LoweredOp):
            return self._op_node(value)
        if isinstance(value, Deferred):
            return self._python_node(value)
        plain = list(value) if isinstance(value, immutable_list) else dict(value) if isinstance(value, immutable_dict) else value
        return rebuilt(plain, self._ref)  # torch.fx's read-only lists and dicts as plain ones; a named tuple keeps its type

    def _attr(self, node: fx.Node) -> Any:
        value: Any = self.traced
        for part in str(node.target).split("."):
            value = getattr(value, part)
        return value


def _parameterless(node: fx.Node, root: fx.GraphModule) -> bool:
    """Whether a node's torch call holds no weights of its own (a twin of it costs no copy)."""
    if node.op != "call_module":
        return True
    module = root.get_submodule(str(node.target))
    return not any(True for _ in module.parameters()) and not any(True for _ in module.buffers())




def _picklable(function: Any) -> Any:
    try:
        pickle.dumps(function)
        return function
    except Exception:
        return NamedFunction(target_name(function))
