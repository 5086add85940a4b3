"""From a traced model to a plan: lower every node, fold batch norms, number the value slots,
turn weights into numpy arrays once, and free each value after its last reader."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from torch import fx, nn

from .._frozen import freeze
from .errors import ConversionError, UnsupportedModelError, UnsupportedNode
from .lowering import Alias, Lowered, Lowerer, LoweredOp, PythonCall, Unsupported, target_name
from .._runner import bfloat16
from .plan import NamedFunction, OpStep, PythonStep, Slot, Step, TorchStep, slots_in


@dataclass(frozen=True)
class FunctionalCall:
    """What a function selector receives for a step that calls no module (``F.relu``, ``torch.cat``,
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
class Plan:
    """What the Model runs (steps, constants, slots) and what conversion needs to choose requests."""

    steps: list[Any]
    constants: dict[int, np.ndarray]
    slot_count: int
    inputs: list[int]
    input_names: list[str]
    output: Any
    unsupported: list[UnsupportedNode]
    subjects: dict[str, Any] = field(default_factory=dict)
    slot_nodes: dict[int, fx.Node] = field(default_factory=dict)


class PlanBuilder:
    """Builds the plan of one traced model, computing in ``dtype`` (float32, float64 or bfloat16)."""

    def __init__(self, caller: str, traced: fx.GraphModule, dtype: str, fallback: bool) -> None:
        self.caller, self.traced, self.dtype, self.fallback = caller, traced, dtype, fallback
        self.lowerer = Lowerer(traced)
        self.lowered: dict[fx.Node, Lowered | UnsupportedNode] = {}
        self.slot_of: dict[fx.Node, int] = {}
        self.literals: dict[fx.Node, Any] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.const_slots: dict[int, int] = {}
        self.keep_alive: list[torch.Tensor] = []
        self.fallback_modules: dict[int, nn.Module] = {}
        self.slot_count = 0
        self.plan = Plan([], {}, 0, [], [], None, [])

    def build(self) -> Plan:
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
        for node in nodes:
            self._emit(node)
        self.plan.unsupported = unsupported
        self.plan.constants = self.constants
        self.plan.slot_count = self.slot_count
        set_free_lists(self.plan)
        return self.plan

    # --------------------------------------------------------------- lowering and folding

    def _lower(self, node: fx.Node) -> None:
        if node.op in ("placeholder", "get_attr"):
            if node.op == "placeholder" or isinstance(self._attr(node), torch.Tensor):
                self.lowerer.tensor_nodes.add(node)
            return
        if node.op == "output":
            return
        try:
            self.lowered[node] = self.lowerer.lower(node)
        except Unsupported as exc:
            self.lowered[node] = UnsupportedNode(node.name, _describe(self.traced, node), str(exc))

    def _fold(self, node: fx.Node, bn: LoweredOp) -> None:
        """Fold an inference batch norm into the conv2d whose output feeds only it."""
        source = bn.inputs[0]
        conv = self.lowered.get(source) if isinstance(source, fx.Node) else None
        if not isinstance(conv, LoweredOp) or conv.op != "conv2d" or len(source.users) != 1:
            return
        weight, bias = conv.inputs[1], conv.inputs[2]
        mean, var, gamma, beta = bn.inputs[1:]
        if not all(t is None or isinstance(t, torch.Tensor) for t in (weight, bias, mean, var, gamma, beta)) or weight is None:
            return  # weights computed in forward: leave the batch norm as an op
        with torch.no_grad():
            scale = 1.0 / torch.sqrt(var.double() + bn.attrs["eps"])
            scale = scale * gamma.double() if gamma is not None else scale
            shift = -mean.double() * scale + (beta.double() if beta is not None else 0.0)
            folded_bias = shift if bias is None else bias.double() * scale + shift
            conv.inputs[1:3] = [weight.double() * scale.reshape(-1, 1, 1, 1), folded_bias]
        conv.folded += [str(node.target) if node.op == "call_module" else node.name]
        self.lowered[node] = Alias(source)

    # --------------------------------------------------------------- emitting steps

    def _emit(self, node: fx.Node) -> None:
        entry = self.lowered.get(node)
        if node.op == "placeholder":
            self.slot_of[node] = slot = self._new_slot()
            self.plan.inputs.append(slot)
            self.plan.input_names.append(str(node.target))
            self.plan.slot_nodes[slot] = node
        elif node.op == "get_attr":
            value = self._attr(node)
            if isinstance(value, torch.Tensor):
                self.slot_of[node] = self._const(value)
            else:
                self.literals[node] = value
        elif node.op == "output":
            self.plan.output = self._ref(node.args[0])
        elif isinstance(entry, Alias):
            ref = self._ref(entry.source)
            if isinstance(ref, Slot):
                self.slot_of[node] = ref.index
            else:
                self.literals[node] = ref
        elif isinstance(entry, LoweredOp):
            self._emit_op(node, entry)
        elif isinstance(entry, PythonCall):
            self._add(node, PythonStep(node.name, entry.function, self._ref(entry.args), self._output(node)))
        elif isinstance(entry, UnsupportedNode):
            self._emit_fallback(node, entry)

    def _emit_op(self, node: fx.Node, lowered: LoweredOp) -> None:
        attrs = self._ref(lowered.attrs)
        module = str(node.target) if node.op == "call_module" else None
        request = getattr(lowered.module, "algoswap_request", "default")  # a layer swapped before keeps its choice
        step = OpStep(
            node.name, lowered.op, str(request), attrs, tuple(self._input(v) for v in lowered.inputs), self._output(node),
            module=module, target=_describe(self.traced, node), folded=tuple(lowered.folded), dynamic=bool(slots_in(attrs)),
            params=tuple(i for i, value in enumerate(lowered.inputs) if isinstance(value, torch.Tensor)),
        )
        self.plan.subjects[node.name] = lowered.module if lowered.module is not None else FunctionalCall(node.name, node.target, lowered.op, dict(lowered.attrs))
        self._add(node, step)

    def _emit_fallback(self, node: fx.Node, unsupported: UnsupportedNode) -> None:
        target: Any = node.target
        if node.op == "call_module":
            target = self._fallback_module(self.traced.get_submodule(str(node.target)))
        elif node.op == "call_function":
            target = _picklable(target)
        step = TorchStep(node.name, target, self._ref(tuple(node.args)), self._ref(dict(node.kwargs)), self._output(node),
                         unsupported.reason, unsupported.target)
        self._add(node, step)

    def _fallback_module(self, module: nn.Module) -> nn.Module:
        """A copy of the module in the compute dtype (converted once, however often it is called)."""
        if id(module) not in self.fallback_modules:
            dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(self.dtype, torch.float32)
            self.fallback_modules[id(module)] = copy.deepcopy(module).to(dtype).eval()
        return self.fallback_modules[id(module)]

    def _add(self, node: fx.Node, step: Step) -> None:
        self.plan.steps.append(step)
        self.plan.slot_nodes[step.output] = node

    # --------------------------------------------------------------- slots and constants

    def _new_slot(self) -> int:
        self.slot_count += 1
        return self.slot_count - 1

    def _output(self, node: fx.Node) -> int:
        self.slot_of[node] = slot = self._new_slot()
        return slot

    def _const(self, tensor: torch.Tensor) -> int:
        """The slot of a weight as a frozen (``algoswap.freeze``), contiguous numpy array in the compute
        dtype (made once).

        Always a copy that nothing can write: the Model owns its weights, so training the torch model
        afterwards changes neither its results nor what backends derive from them and keep (reordered
        weights, device copies: backends may cache those for frozen arrays only)."""
        if id(tensor) in self.const_slots:
            return self.const_slots[id(tensor)]
        data = tensor.detach().cpu()
        if data.is_floating_point():
            data = data.to(torch.float64 if self.dtype == "float64" else torch.float32)
        array = data.numpy()
        if self.dtype == "bfloat16" and array.dtype.kind == "f":
            array = array.astype(bfloat16())
        array = freeze(array)
        slot = self.const_slots[id(tensor)] = self._new_slot()
        self.constants[slot] = array
        self.keep_alive.append(tensor)  # ids stay unique while building
        return slot

    def _input(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, torch.Tensor):
            return self._const(value)
        if isinstance(value, fx.Node) and value in self.slot_of:
            return self.slot_of[value]
        raise ConversionError(f"{self.caller}: an op input is not a tensor: {value!r}")

    def _ref(self, value: Any) -> Any:
        """``value`` with nodes replaced by their slots (or Python values) and tensors by constant slots."""
        if isinstance(value, fx.Node):
            return self.literals[value] if value in self.literals else Slot(self.slot_of[value])
        if isinstance(value, torch.Tensor):
            return Slot(self._const(value))
        if isinstance(value, (list, tuple)):
            items = [self._ref(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            return {k: self._ref(v) for k, v in value.items()}
        return value

    def _attr(self, node: fx.Node) -> Any:
        value: Any = self.traced
        for part in str(node.target).split("."):
            value = getattr(value, part)
        return value


def set_free_lists(plan: Plan) -> None:
    """Give each step the slots whose last reader it is (constants and outputs are never freed)."""
    keep = set(plan.constants) | slots_in(plan.output)
    last: dict[int, int] = {}
    for index, step in enumerate(plan.steps):
        for slot in step.reads():
            last[slot] = index
    for index, step in enumerate(plan.steps):
        done = {slot for slot in step.reads() if last[slot] == index}
        if step.output not in last:
            done.add(step.output)  # never read: drop it at once
        step.free = tuple(sorted(done - keep))


def _describe(root: fx.GraphModule, node: fx.Node) -> str:
    if node.op == "call_module":
        return f"{type(root.get_submodule(str(node.target))).__name__} module {node.target!r}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return target_name(node.target)


def _picklable(function: Any) -> Any:
    try:
        pickle.dumps(function)
        return function
    except Exception:
        return NamedFunction(target_name(function))
