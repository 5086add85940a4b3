"""``swap_backend`` (alias ``convert``): a whole torch model as an ``algoswap.Model`` run by the registry.

    >>> model = swap_backend(zoo.build("resnet18"), {"conv2d": "winograd"}, sample_input_shape=(1, 3, 224, 224))

The module is traced with ``torch.fx``; every node becomes a registry op (``lowering``), batch norms
are folded into the convolution before them where that convolution feeds only them (``builder``),
and the requests of ``algorithm`` are attached to the op nodes and checked here.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from .._errors import OpArgumentError, SelectorError
from .._global import get_registry
from .._requests import IN_TORCH, Selector, Subject, assign, selector_argument
from .._select import select
from ..graph._fusion import find_chains
from ..graph._node import GraphError, Node, nodes_in
from .builder import FunctionalCall, ModelBuilder, ModelGraph
from .errors import ConversionError, UnsupportedModelError, UnsupportedNode
from .model import Model
from .targets import subject
from .modules import batched, binding_for
from .tracing import EXPORT, FX, TRACERS, TraceFailed, export, symbolic_trace
from .bridge import COMPUTE_DTYPES
from .tensors import DTYPE_NAMES

CALLER = "swap_backend"
_DTYPES: dict[torch.dtype | str, str] = {**{name: name for name in COMPUTE_DTYPES}, **{t: name for name, t in COMPUTE_DTYPES.items()}}
_ACCEPTED = ", ".join(f"torch.{name}" for name in COMPUTE_DTYPES)  # "torch.float16, torch.bfloat16, ..."


def swap_backend(
    module: nn.Module,
    algorithm: Selector = None,
    sample_input_shape: Sequence[int] | None = None,
    *,
    dtype: torch.dtype | str | None = None,
    fallback: str | None = None,
    fuse: bool = True,
    backends: Sequence[str] | None = None,
    capture: bool | None = None,
    tracer: str | None = None,
    algos: Selector = None,
    algorithms: Selector = None,
) -> Model:
    """Convert ``module`` (in eval mode) into an ``algoswap.Model`` that runs every node through the registry.

    ``algorithm`` (``algos`` and ``algorithms`` are its old names) is a selector, as for
    ``swap_operation``: a dict from op name ("conv2d", "linear", "maxpool2d", "add", ...) to a
    request string, a list of them in forward order, a dict from module name ("layer1.0.conv1") or
    fx node name ("relu_1") to request, a function of the module (or of the module and its input
    shape, batch included) or ``prefer(...)``; or, for the whole model, one request string, a list
    or a function. Steps that call no module (``F.relu``, ``torch.cat``, ``x.view``, ``+``) give
    functions a ``FunctionalCall`` (``.name``, ``.target``, ``.op``, ``.attrs``). Steps given
    nothing keep the request of a layer swapped before by ``swap_operation``, else "default".
    ``backends`` (e.g. ``["dnnl", "numpy"]``) serves those with the first listed backend that
    implements their op; a whole-model ``"dnnl:default"`` prefers dnnl and runs the ops it lacks
    (flatten) on their default.

    ``sample_input_shape`` (batch included) runs the module once in PyTorch (shape propagation):
    function selectors then see input shapes, and every step's implementation is selected and
    checked now (errors name the node). Without it, selection happens at the first call. One
    unbatched sample's shape (C, H, W), for a model whose input goes first into modules torch runs
    unbatched (nn.Conv2d, the 2-D poolings), is read as a batch of one.

    A step given ``"torch"`` (per op, layer or node, or for the whole model) stays in PyTorch, with a
    batch norm that would be folded into it; ``explain()`` shows it as ``torch (requested)``.

    ``dtype`` (None: the module's; torch.float32, float64, float16, bfloat16 or their names) is the
    dtype of the weights and of the computation; inputs are cast to it. Batch norms are folded in
    float64 and rounded once to it. Implementations without kernels in that dtype are not selected
    (the NumPy reference computes half precision in float32 and rounds each op's result once).
    ``fallback="torch"`` runs the nodes no registry op serves in PyTorch instead of refusing the
    model (``explain()`` lists them).

    ``fuse`` (default True): a conv2d whose output feeds only an add and/or an activation (relu,
    relu6, silu, hardswish, exact gelu) runs with them as one ``conv2d_fused`` call where the conv2d's
    implementation has such a twin that fuses them (oneDNN post-ops, the CUDA epilogue); likewise
    a batchnorm2d (one not folded into a convolution) whose output feeds only such an activation
    runs with it as one ``batchnorm2d_fused`` call. ``explain()`` shows each fused chain, or why it
    stayed unfused.

    ``capture`` (default None: on unless ALGOSWAP_CAPTURE=0): a model whose every step runs in one memory
    space that records graphs (CUDA) records its forward pass per input signature at the second call and
    replays it from then on; False runs every call step by step (``Model.capture`` switches it later).

    ``tracer`` ("torch.fx", "torch.export" or None, the default) is how the model's forward becomes a
    graph (``model.tracer`` says which did). torch.fx's symbolic tracing keeps every size symbolic (one
    conversion serves any input shape); torch.export runs the model's Python at the sample input, so
    forwards that branch on sizes convert, and values computed from weights and sizes alone (positional
    encodings, masks, index tables) become constants; every size is then fixed but the batch's (where the
    model lets it vary, and the sample's batch is not 1), and the Model refuses other input shapes. None
    traces with torch.fx and, given a sample_input_shape, captures with torch.export where torch.fx cannot
    trace the model or leaves nodes no registry op serves, keeping the graph that leaves fewer.
    """
    if not isinstance(module, nn.Module):
        raise ConversionError(f"{CALLER}: expected a torch.nn.Module, got {type(module).__name__}")
    _check_eval(module)
    compute = _compute_dtype(module, dtype)
    if fallback not in (None, "torch"):
        raise ConversionError(f"{CALLER}: fallback must be None or 'torch'; got {fallback!r}")
    selector = selector_argument(CALLER, algorithm, algos=algos, algorithms=algorithms)
    if tracer not in (None, *TRACERS):
        raise ConversionError(f"{CALLER}: tracer must be None, {FX!r} or {EXPORT!r}; got {tracer!r}")
    if tracer == EXPORT and sample_input_shape is None:
        raise ConversionError(f"{CALLER}: tracer={EXPORT!r} captures the model at its sample input: give sample_input_shape")
    best: tuple[Model, int] | None = None
    failed: ConversionError | None = None
    for captured in _captures(module, sample_input_shape, tracer):
        try:
            traced, sample, used = captured()
            graph = ModelBuilder(CALLER, traced, compute, True).build()
            if best is not None and len(graph.unsupported) >= best[1]:
                continue
            if graph.unsupported and fallback != "torch":
                raise UnsupportedModelError(CALLER, graph.unsupported)
            model = _model(traced, sample, graph, used, selector, backends, compute, fuse, fallback == "torch")
        except SelectorError:
            raise  # the request itself
        except ConversionError as exc:
            failed = exc if failed is None or isinstance(failed, TraceFailed) else failed  # the first that got past tracing
            continue
        except Exception as exc:  # a lowering rule's own failure: the next capture may not meet it
            failed = _failure(exc) if failed is None or isinstance(failed, TraceFailed) else failed
            continue
        model.capture = capture
        best = (model, len(graph.unsupported))
        if not graph.unsupported:
            break
    if best is None:
        assert failed is not None
        raise failed
    return best[0]


def _failure(exc: Exception) -> ConversionError:
    error = ConversionError(f"{CALLER}: converting the model failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _model(traced: fx.GraphModule, sample: tuple[int, ...] | None, graph: ModelGraph, tracer: str, selector: Selector,
           backends: Sequence[str] | None, compute: str, fuse: bool, fallback: bool) -> Model:
    """The Model of a built graph, its requests assigned and (given a sample shape) its implementations selected."""
    requests = _assign_requests(graph, traced, selector, backends, sample is not None, compute)
    kept = frozenset(name for name, request in requests.items() if request == IN_TORCH)
    if kept:  # built again with those nodes (and the batch norms folded into them) left in PyTorch
        graph = ModelBuilder(CALLER, traced, compute, fallback, kept).build()
    for node in graph.nodes:
        if node.kind == "op":
            node.request = requests[node.name]
    chains = find_chains(_outputs(graph)) if fuse else []
    model = Model(graph.inputs, graph.input_names, graph.output, graph.nodes, compute, chains, fallback, graph.guards)
    model.tracer = tracer
    if sample is not None:
        _preselect(model, graph, sample)
    return model


def _outputs(graph: ModelGraph) -> list[Node]:
    return nodes_in(graph.output)


convert = swap_backend


def _check_eval(module: nn.Module) -> None:
    training = [name or type(module).__name__ for name, m in module.named_modules() if m.training]
    if training:
        shown = ", ".join(training[:3]) + (f" and {len(training) - 3} more" if len(training) > 3 else "")
        raise ConversionError(
            f"{CALLER}: the module is in training mode ({shown}); the converted model is for inference "
            "(dropout is the identity, batch norm uses its running statistics). Call module.eval() first, "
            "or convert copy.deepcopy(module).eval() to keep training this one."
        )


def _compute_dtype(module: nn.Module, dtype: torch.dtype | str | None) -> str:
    if dtype is None:
        found = next((t.dtype for t in [*module.parameters(), *module.buffers()] if t.is_floating_point()), torch.float32)
        if found not in _DTYPES:
            raise ConversionError(f"{CALLER}: the module's weights are {found}; pass dtype= ({_ACCEPTED})")
        return _DTYPES[found]
    if not isinstance(dtype, (str, torch.dtype)) or dtype not in _DTYPES:
        raise ConversionError(f"{CALLER}: dtype must be None, one of {_ACCEPTED} or one of their names; got {dtype!r}")
    return _DTYPES[dtype]


Captured = Callable[[], tuple[fx.GraphModule, tuple[int, ...] | None, str]]


def _captures(module: nn.Module, shape: Sequence[int] | None, tracer: str | None) -> Iterator[Captured]:
    """The ways to capture the model, in order of preference, each made when called: the graph, its sample
    shape (batched) and the tracer. torch.fx first (sizes symbolic); given a sample shape, torch.export with
    a dynamic batch, then with every size fixed (see ``swap_backend``)."""
    batched: list[tuple[int, ...]] = []

    def fx_trace() -> tuple[fx.GraphModule, tuple[int, ...] | None, str]:
        traced = symbolic_trace(CALLER, module)
        sample = None if shape is None else _batched_sample(traced, tuple(shape))
        if sample is not None:
            batched.append(sample)
            _propagate(traced, module, sample)
        return traced, sample, FX

    def exported(dynamic_batch: bool) -> Captured:
        def capture() -> tuple[fx.GraphModule, tuple[int, ...] | None, str]:
            sample = batched[0] if batched else tuple(shape or ())
            graph = export(CALLER, module, _sample_tensor(module, sample), dynamic_batch)
            _propagate(graph, module, sample)
            return graph, sample, EXPORT
        return capture

    if tracer in (None, FX):
        yield fx_trace
    if shape is not None and tracer in (None, EXPORT):
        yield exported(True)
        yield exported(False)


class _Recorder(ShapeProp):
    """Shape propagation that also keeps the Python values (sizes) computed in forward."""

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if not isinstance(result, torch.Tensor):
            n.meta["algoswap_value"] = result
        return result


def _batched_sample(traced: fx.GraphModule, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The sample shape as a batch: one unbatched sample (C, H, W) of a model whose input goes first into
    modules torch runs on one sample too (nn.Conv2d, the 2-D poolings) becomes a batch of one."""
    placeholder = next((n for n in traced.graph.nodes if n.op == "placeholder"), None)
    users = [] if placeholder is None else list(placeholder.users)
    modules = [traced.get_submodule(str(n.target)) for n in users if n.op == "call_module"]
    bindings = [binding_for(m) for m in modules]
    if not users or len(modules) != len(users) or any(b is None for b in bindings):
        return shape
    widened = {batched(b, shape) for b in bindings if b is not None}
    return widened.pop() if len(widened) == 1 else shape


def _sample_tensor(module: nn.Module, shape: tuple[int, ...]) -> torch.Tensor:
    """A random input of ``shape`` in the module's dtype, on its device."""
    tensors = [*module.parameters(), *module.buffers()]
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    device = next((t.device for t in tensors), torch.device("cpu"))
    return torch.randn(shape, dtype=dtype, device=device)


def _propagate(traced: fx.GraphModule, module: nn.Module, shape: tuple[int, ...]) -> None:
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints the traceback itself
            _Recorder(traced).propagate(_sample_tensor(module, shape))
    except Exception as exc:
        cause = exc.__cause__ or exc
        raise ConversionError(f"{CALLER}: running the module on a sample input of shape {shape} failed: {type(cause).__name__}: {cause}") from exc


# ---------------------------------------------------------------------------- requests


def _assign_requests(graph: ModelGraph, traced: fx.GraphModule, algorithm: Selector, backends: Sequence[str] | None,
                     shapes_known: bool, compute: str) -> dict[str, str]:
    """Each op node's request from the selector (``algoswap._requests``), by node name ("torch": leave it
    in PyTorch); errors name the layer or node."""
    nodes = [n for n in graph.nodes if n.kind == "op"]
    subjects = [_subject(graph, n, shapes_known) for n in nodes]
    node_of = {id(subject): node for subject, node in zip(subjects, nodes)}
    metas = {n.name: m for n in traced.graph.nodes if hasattr(m := n.meta.get("tensor_meta"), "dtype")} if shapes_known else {}

    def check(subject: Subject, request: str) -> None:
        node = node_of[id(subject)]
        inputs = _known_inputs(node, metas, compute)
        if inputs is not None and not node.needs and request not in ("default", "auto"):  # those: at _preselect
            shapes = [None if i is None else i[0] for i in inputs]
            select(get_registry(), str(node.op), shapes, [None if i is None else i[1] for i in inputs], node.attrs, request, None)

    return {node.name: request for node, request in zip(nodes, assign(CALLER, subjects, algorithm, backends, check, in_torch=True))}


def _subject(graph: ModelGraph, node: Node, shapes_known: bool) -> Subject:
    """The node as the resolver sees it, a function selector receiving its module (or ``FunctionalCall``)."""
    return subject(node, graph.subjects.get(node.name), graph.input_shapes.get(node.name) if shapes_known else None)


def _known_inputs(node: Node, metas: dict[str, Any], compute: str) -> list[tuple[Any, str] | None] | None:
    """Each input's shape and dtype: a weight's, else the sample run's (None: unknown, nothing to check)."""
    known: list[tuple[Any, str] | None] = []
    for source in node.inputs:
        if source is None or source.kind == "constant":
            known.append(None if source is None else (source.shape, source.dtype))
            continue
        meta = metas.get(source.name)
        if meta is None:
            return None
        dtype = compute if meta.dtype.is_floating_point else DTYPE_NAMES.get(meta.dtype, str(meta.dtype))
        known.append((tuple(int(d) for d in meta.shape), dtype))
    return known


def _preselect(model: Model, graph: ModelGraph, shape: tuple[int, ...]) -> None:
    """Plan (select every node's implementation) for host inputs of the sample shape now; an error
    names the node (SelectorError where it asked for something, ConversionError otherwise)."""
    try:
        model.plan(shape)
    except (GraphError, OpArgumentError) as exc:
        text = str(exc) if isinstance(exc, GraphError) else f"node {getattr(exc, 'node', '?')!r} ({exc.op}): {exc}"
        node = next((n for n in graph.nodes if text.startswith(f"node {n.name!r}")), None)
        explicit = node is not None and node.request not in ("default", "auto")
        error = SelectorError if explicit else ConversionError
        if node is not None and node.kind == "op":
            detail = text.split("): ", 1)[1] if "): " in text else text
            raise error(f"{subject(node, input_shape=graph.input_shapes.get(node.name)).where(CALLER)}: {detail}") from None
        raise error(f"{CALLER}: {text}") from None


__all__ = ["ConversionError", "FunctionalCall", "Model", "UnsupportedModelError", "UnsupportedNode", "convert", "swap_backend"]
