"""``algoswap.Model``: a torch model converted by ``swap_backend``, the torch-facing wrapper of one
executor program (torch tensors in and out, pickling, explain)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np
import torch

from .._errors import OpArgumentError, SelectorError
from .._frozen import freeze
from .._global import get_registry
from .._inputs import host_array
from .._records import MemorySpace
from .._ref import resolve_ref
from .._runner import numpy_dtype
from ..graph._capture import CaptureReport
from ..graph._executor import Executor, space_of
from ..graph._fusion import TWINS, Chain, find_chains
from ..graph._node import (Call, Node, Origin, Shaped, flat_state, mapped, nodes_in, rebuilt, topological, unflat_state,
                           with_values)
from ..graph._plan import PlanOptions
from ..graph._program import Program, Step
from .._requests import IN_TORCH, Selector, assign
from .bridge import COMPUTE_DTYPES
from .switches import following_torch
from .explain import REQUESTED, Explanation, Row
from .fallback import TorchRunner, reaches
from .modules import batched_ranks
from .targets import providers, subject, unserved
from .tensors import array_to_tensor, device_tensor, tensor_to_array

SUBGRAPH = "forward"
WAITING = "not run yet: call the model or pass sample_input_shape"


class Model:
    """A converted model: its graph, and the executor that plans and runs it per input signature.

    Call it with torch tensors (it returns tensors on the first tensor's device: CUDA tensors stay
    on the GPU throughout) or numpy arrays (it returns arrays); floating inputs are cast to
    ``dtype``, the dtype of its weights and computation. It is for inference: no gradients flow
    through it. ``nodes`` lists the graph's nodes; ``program`` is the plan of the latest call.

    One unbatched sample, as torch's nn.Conv2d and 2-D poolings take it ((C, H, W) for an (N, C, H,
    W) input), is run as a batch of one, and the batch axis is removed from the outputs again: where
    every input of the model goes first into such ops (``sample_ranks``).

    It pickles and deep-copies, however deep its graph (``__getstate__``); implementations are chosen
    again at the first call after loading, and ``retarget`` chooses its requests again.
    """

    def __init__(self, inputs: list[Node], input_names: list[str], output: Any, nodes: list[Node], dtype: str,
                 chains: Sequence[Chain] = (), fallback: bool = False, guards: Sequence[Node] = ()) -> None:
        self.inputs, self.input_names, self.output = inputs, input_names, output
        self.nodes, self.dtype, self.chains, self.fallback = nodes, dtype, list(chains), fallback
        self.guards = list(guards)
        self._outputs = nodes_in(output)
        self.sample_ranks = _sample_ranks(inputs, nodes)
        self.providers = providers(self.op_nodes())
        self._capture: bool | None = None  # None: follow ALGOSWAP_CAPTURE
        self.tracer = "torch.fx"  # how swap_backend made the graph: "torch.fx" or "torch.export"
        self._executor: Executor | None = None
        self._outputs_at = 0  # set with the executor

    @property
    def executor(self) -> Executor:
        """The executor that plans and runs the graph, made at its first use. A request no backend here
        serves (a model unpickled where a backend it asked for is not installed) is a SelectorError
        then, naming every such layer, what is missing and the ``retarget`` call that runs it here."""
        if self._executor is None:
            try:
                self._executor = self._new_executor()
            except SelectorError as exc:
                raise SelectorError(unserved(self.nodes, self.providers) or str(exc)) from None
        return self._executor

    def _new_executor(self) -> Executor:
        """One subgraph: the guards on the inputs' shapes alone (checked first: the input a torch.export capture
        takes), the outputs, then the model's other shape guards; planning checks the guards for every input
        signature (they compute nothing when the model runs)."""
        options = PlanOptions(TorchRunner(), self.fallback, self.chains, outputs_home=False)
        first = [g for g in self.guards if all(n.kind == "placeholder" for n in g.needs)]
        later = [g for g in self.guards if not any(g is f for f in first)]  # they may read a fused chain's member
        self._outputs_at = len(first)  # where the outputs' results start
        return Executor({SUBGRAPH: [*first, *(self._outputs or self.inputs[:1]), *later]}, options=options,
                        capture=self._capture)

    def retarget(self, algorithm: Selector, *, backends: Sequence[str] | None = None) -> Model:
        """Choose the requests of the op steps again, as ``swap_backend``'s ``algorithm`` and ``backends``
        do (one request for the whole model, op names, layer or node names; a function receives the
        graph node), and plan afresh at the next call; steps given nothing keep their request.
        ``model.retarget("default")`` runs a model unpickled where a backend it asked for is missing on
        the backends installed here. Returns the model."""
        nodes = self.op_nodes()
        requests = assign(f"{type(self).__name__}.retarget", [subject(n) for n in nodes], algorithm, backends)
        for node, request in zip(nodes, requests):
            node.request = request
        self.providers = providers(nodes)
        if self.chains:  # fused where the new requests let a chain's members join its head
            self.chains = find_chains(self._outputs)
        self._executor = None
        return self

    @property
    def capture(self) -> bool | None:
        """Whether a call replays its input signature's forward pass as one device graph (a CUDA graph:
        where every op runs on a GPU backend and the inputs are CUDA tensors): True, False, or None,
        the default, to follow ALGOSWAP_CAPTURE (on unless "0"). The first call of a signature runs
        eagerly, the second captures, later ones replay; ``explain()`` says which ran, or why not.
        Setting False drops the captured graphs."""
        return self._capture

    @capture.setter
    def capture(self, value: bool | None) -> None:
        if self._executor is not None:
            self._executor.captures.enabled = value
        self._capture = value

    @property
    def capture_report(self) -> CaptureReport | None:
        """How the latest call ran: replayed, captured or eager (with why), None before any."""
        return None if self._executor is None else self._executor.captures.last

    @property
    def torch_dtype(self) -> torch.dtype:
        return COMPUTE_DTYPES[self.dtype]

    @property
    def program(self) -> Program | None:
        """The program of the latest call (or of the sample input), None before any."""
        return None if self._executor is None else self._executor.last

    @property
    def folded_batchnorms(self) -> list[str]:
        """The batch norms folded into the convolution before them."""
        return [name for node in self.op_nodes() if isinstance(node.source, Origin) for name in node.source.folded]

    @property
    def folded_scales(self) -> list[str]:
        """The muls by a constant per-feature scale (ConvNeXt's layer scale) folded into the linear before them."""
        return [name for node in self.op_nodes() if isinstance(node.source, Origin) for name in node.source.scaled]

    @property
    def fused(self) -> list[Chain]:
        """The fusion chains (conv2d+add+relu, conv2d+relu, batchnorm2d+relu, ...) that may run as one call of
        their head's fused twin (conv2d_fused, batchnorm2d_fused)."""
        return self.chains

    def fused_step(self, chain: Chain) -> Step | None:
        """The fused step of a chain in the latest program, None if it ran unfused (or none ran)."""
        program = self.program
        return None if program is None else next((s for s in program.steps if s.members and s.members[0] is chain.head), None)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """The model's weights: frozen numpy arrays in its dtype, by name."""
        return {n.name: n.host for n in topological(self._outputs) if n.kind == "constant"}

    def op_nodes(self) -> list[Node]:
        """Every registry-op node, in graph order."""
        return [node for node in self.nodes if node.kind == "op"]

    def op_counts(self) -> dict[str, int]:
        """How many nodes run each registry op (fallback nodes count under "torch")."""
        return dict(Counter(str(n.op) if n.kind == "op" else "torch" for n in self.nodes if n.kind in ("op", "torch")))

    # ------------------------------------------------------------------ running

    def __call__(self, *inputs: Any) -> Any:
        return self._call(inputs, next((x for x in inputs if isinstance(x, torch.Tensor)), None))

    def predict(self, *inputs: Any, out_type: type | None = None) -> Any:
        """The outputs for ``inputs`` (no gradients, as every call) as ``out_type``: ``torch.Tensor``,
        ``numpy.ndarray`` or None (the kind of the inputs, as ``model(*inputs)``). The swapping
        library's ``Model.predict(input, out_type)``."""
        if out_type is None:
            return self(*inputs)
        if out_type is np.ndarray:
            return self._call(inputs, None)
        if out_type is torch.Tensor:
            tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
            return self._call(inputs, tensors[0] if tensors else torch.empty(0))  # numpy inputs: CPU tensors out
        raise OpArgumentError("Model.predict", "out_type", out_type, "torch.Tensor, numpy.ndarray or None (the inputs' kind)")

    def _call(self, inputs: Sequence[Any], like: torch.Tensor | None) -> Any:
        """The outputs as tensors on ``like``'s device, or as host arrays when ``like`` is None."""
        if len(inputs) != len(self.inputs):
            names = ", ".join(self.input_names)
            raise TypeError(f"Model takes {len(self.inputs)} input{'s' if len(self.inputs) != 1 else ''} ({names}); got {len(inputs)}")
        arrays = [self._to_array(x, name) for x, name in zip(inputs, self.input_names)]
        if not self._one_sample([len(a.shape) for a in arrays]):
            return _wrap(self.run(*arrays), like)
        outputs = self.run(*(a.reshape((1, *a.shape)) for a in arrays))
        return _wrap(mapped(outputs, _unbatched), like)

    def _one_sample(self, ranks: Sequence[int]) -> bool:
        """Whether inputs of these ranks are one unbatched sample each (all of them, or none, may be)."""
        single = [r is not None and rank == r - 1 for rank, r in zip(ranks, self.sample_ranks)]
        if single and all(single):
            return True
        if any(single):
            shown = ", ".join(f"{name} {rank}-D" for name, rank in zip(self.input_names, ranks))
            raise OpArgumentError("algoswap.Model", "inputs", shown, "every input batched, or every one an unbatched "
                                  f"sample (ranks {', '.join(map(str, self.sample_ranks))} with the batch)")
        return False

    def run(self, *arrays: Any) -> Any:
        """Run on arrays already in ``dtype`` (numpy arrays, or a device backend's arrays); returns the
        output structure of arrays, each in the memory space where it was produced. Backends are
        wished TF32 and timed engine choice as torch's switches say at this call (``algoswap.tf32_wish``,
        ``algoswap.benchmark_wish``), as torch would run the model."""
        with following_torch():
            results = self.executor.run(SUBGRAPH, dict(zip(self.inputs, arrays)))
        values = {id(node): value for node, value in zip(self._outputs, results[self._outputs_at:])}
        return with_values(self.output, values)

    def plan(self, *shapes: Sequence[int]) -> Program:
        """The program for host inputs of these shapes (planned, and cached, now; one unbatched
        sample's shapes plan the batch of one it runs as)."""
        if len(shapes) != len(self.inputs):
            raise TypeError(f"Model.plan takes one shape per input ({', '.join(self.input_names)}); got {len(shapes)}")
        if self._one_sample([len(shape) for shape in shapes]):
            shapes = tuple((1, *shape) for shape in shapes)
        feed = {node: Shaped(tuple(shape), self.dtype) for node, shape in zip(self.inputs, shapes)}
        program = self.executor.last = self.executor.plan(SUBGRAPH, feed)
        self.executor.captures.last = None  # planned, not run
        return program

    def _to_array(self, value: Any, name: str) -> Any:
        """An input as an array: a tensor on a device a backend's memory space holds stays there (no
        copy); others become contiguous numpy arrays; floating inputs in the model's dtype."""
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            tensor = (tensor.to(self.torch_dtype) if tensor.is_floating_point() else tensor).contiguous()
            space = _device_space(tensor.device.type)
            if space is not None and space.from_dlpack is not None:
                return resolve_ref(space.from_dlpack)(tensor)
            return tensor_to_array(tensor.cpu())
        array = host_array(value, "algoswap.Model", lambda: name)
        floating = array.dtype.kind == "f" or array.dtype.name == "bfloat16"
        dtype = numpy_dtype(self.dtype) if floating else None
        return np.ascontiguousarray(array, dtype=dtype).reshape(array.shape)  # a 0-d array stays 0-d

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        """The graph's nodes first (``flat_state``: pickle and copy.deepcopy, which both come here, never
        recurse along its depth), without the executor (its programs hold registry records): planned
        again at the first call."""
        state = {key: value for key, value in self.__dict__.items() if key != "_executor"}
        return flat_state(state, [*self.inputs, *self.nodes, *self._outputs, *self.guards])

    def __setstate__(self, state: dict[str, Any]) -> None:
        # pickled before capture or providers existed: their defaults
        self.__dict__.update({"_capture": None, "providers": {}, "tracer": "torch.fx", **unflat_state(state), "_executor": None})
        self.sample_ranks = _sample_ranks(self.inputs, self.nodes)
        for node in topological(self._outputs):
            if node.kind == "constant":
                node.host = freeze(node.host)  # frozen again: backends keep what they derive from frozen arrays only

    # ------------------------------------------------------------------ explaining

    def explain(self) -> Explanation:
        """One row per op, fused chain and torch node of the latest program: what ran it, its kernel,
        the rejected candidates, and every move between memory spaces (the kernels as a call would run
        them now: under torch's switches)."""
        with following_torch():
            return self._explain()

    def _explain(self) -> Explanation:
        program = self.program
        if program is None:
            return Explanation(Row(n.name, str(n.op) if n.kind == "op" else "torch", None, n.request, note=WAITING)
                               for n in self.nodes if n.kind in ("op", "torch"))
        rows = Explanation(_op_row(step) for step in program.planned)  # computed once, when planning
        for step in program.steps:
            if step.kind in ("op", "fused"):
                rows.append(_op_row(step))
            elif step.kind == "torch":
                rows.append(_torch_row(step))
        report = self.capture_report
        rows.capture = "" if report is None else str(report)
        return rows

    def backends(self) -> list[str]:
        """The backends of the latest program's implementations (empty before the first call without a sample input)."""
        program = self.program
        return [] if program is None else sorted({s.backend for s in program.steps if s.backend})

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {op}" for op, n in sorted(self.op_counts().items(), key=lambda item: (-item[1], item[0])))
        backends = ", ".join(self.backends()) or "none selected yet (selection happens at the first call)"
        parts = [f"{len(self.nodes)} nodes: {counts}" if counts else f"{len(self.nodes)} nodes"]
        folded = len(self.folded_batchnorms)
        if folded:
            parts.append(f"{folded} batch norm{'s' if folded != 1 else ''} folded")
        if self.folded_scales:
            parts.append(f"{len(self.folded_scales)} layer scale{'s' if len(self.folded_scales) != 1 else ''} folded")
        if self.chains:
            heads = Counter(str(chain.head.op) for chain in self.chains)
            parts.append(", ".join(f"{count} {op} chain{'s' if count != 1 else ''}" for op, count in heads.items()) + " fusable")
        for why, count in Counter("requested" if n.request == IN_TORCH else "fallback" for n in self.nodes if n.kind == "torch").items():
            parts.append(f"{count} node{'s' if count != 1 else ''} in torch ({why})")
        parts += [f"backends: {backends}", f"dtype {self.dtype}", f"traced by {self.tracer}"]
        return f"algoswap.Model({'; '.join(parts)})"


def _op_row(step: Step) -> Row:
    selection = step.selection
    assert selection is not None
    row = Row.from_selection(step.name, selection, step.request, step.input_shape, backward=False)
    row.op = step.op
    node = step.members[0] if step.members else step.node
    origin = node.source if node is not None and isinstance(node.source, Origin) else Origin(None, "")
    notes = [f"batch norm {', '.join(origin.folded)} folded"] if origin.folded else []
    notes += [f"scale {', '.join(origin.scaled)} folded into the weights"] if origin.scaled else []
    if step.members:
        fused = [f"{m.op} {m.name!r}" for m in step.members[1:]]
        into = TWINS[str(step.members[0].op)].into
        bias = ["bias"] if step.members[0].op == "conv2d" else []
        notes.append(f"one {selection.call.op} call: {', '.join(bias + fused)} fused into {into}")
    row.note = "; ".join(filter(None, [*notes, step.note]))
    return row


def _torch_row(step: Step) -> Row:
    node = step.node
    where = "" if step.memory.is_host else f" on {step.memory.name}" if reaches(step.memory) else f" (via host, for {step.memory.name})"
    if node is not None and node.request == IN_TORCH:
        return Row(step.name, str(node.op), step.input_shape, IN_TORCH, f"{REQUESTED}{where}", "PyTorch", note=step.note)
    op = node.op if node is not None and node.kind == "op" else step.op
    reason = step.note if node is not None and node.kind == "op" else f"not in the registry: {step.note}"
    return Row(step.name, str(op), step.input_shape, "-", f"torch (fallback){where}", "PyTorch", note=reason)


def _sample_ranks(inputs: list[Node], nodes: list[Node]) -> list[int | None]:
    """For each input, the rank of its batched form where every node it feeds runs one unbatched sample
    in torch too (the ops of nn.Conv2d and the 2-D poolings), else None."""
    takes = batched_ranks()
    users: dict[int, list[Node]] = {id(i): [] for i in inputs}
    for node in nodes:
        for source in _fed_by(node):
            if id(source) in users:
                users[id(source)].append(node)
    ranks: list[int | None] = []
    for i in inputs:
        found = {takes.get(str(n.op)) for n in users[id(i)]}
        ranks.append(found.pop() if len(found) == 1 and None not in found else None)
    return ranks


def _fed_by(node: Node) -> list[Node]:
    """The nodes whose values ``node`` reads."""
    if isinstance(node.source, Call):
        return nodes_in((node.source.args, node.source.kwargs))
    return [i for i in node.inputs if i is not None]


def _unbatched(value: Any) -> Any:
    """An output of a batch of one without its batch axis."""
    if not hasattr(value, "shape"):
        return value  # a Python value the model returns
    shape = tuple(value.shape)
    if shape[:1] != (1,):
        raise OpArgumentError("algoswap.Model", "output", f"shape {shape}", "a batch axis to remove (the input was one unbatched sample)")
    return value.reshape(shape[1:])


def _device_space(device_type: str) -> MemorySpace | None:
    """The memory space of an available backend whose arrays live on this torch device type ("cuda", ...)."""
    if device_type == "cpu":
        return None
    registry = get_registry()
    return next((b.memory for b in registry.backends.values() if b.memory.name == device_type and b.availability() is True), None)


def _wrap(value: Any, like: torch.Tensor | None) -> Any:
    """Output arrays as tensors on ``like``'s device (or as host arrays when the inputs were arrays);
    a device's arrays go to a tensor on that device through DLPack, without a copy."""
    if isinstance(value, np.ndarray):
        array = value if value.flags.writeable else value.copy()  # never hand out the model's weights
        array = array if array.flags.c_contiguous else np.ascontiguousarray(array)  # channels-last activations come out NCHW
        return array if like is None else array_to_tensor(array).to(like.device)
    if isinstance(value, (list, tuple, dict)):
        return rebuilt(value, lambda v: _wrap(v, like))
    space = space_of(value) if hasattr(value, "shape") and hasattr(value, "dtype") else None
    if space is None or space.is_host:
        return value
    if like is not None and like.device.type == space.name and (hasattr(value, "__dlpack__") or hasattr(value, "as_torch")):
        return device_tensor(value)
    return _wrap(space.download(value), like)
