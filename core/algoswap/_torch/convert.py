"""``swap_backend`` (alias ``convert``): a whole torch model as an ``algoswap.Model`` run by the registry.

    >>> model = swap_backend(zoo.build("resnet18"), {"conv2d": "winograd"}, sample_input_shape=(1, 3, 224, 224))

The module is traced with ``torch.fx``; every node becomes a registry op (``lowering``), batch norms
are folded into the convolution before them where that convolution feeds only them (``builder``),
and the requests of ``algos`` are attached to the op steps and checked here.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable, Sequence

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from .._errors import AlgoswapError, OpArgumentError
from .._global import get_registry
from .._registry import suggest
from .._select import check_known
from ..graph._fusion import find_chains
from ..graph._node import GraphError, Node, Origin
from .builder import FunctionalCall, ModelBuilder, ModelGraph
from .errors import ConversionError, UnsupportedModelError, UnsupportedNode
from .model import Model, _output_nodes
from .modules import SwappedModule
from .selectors import SelectorError, _positional_count

CALLER = "swap_backend"
_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
           "float32": "float32", "float64": "float64", "bfloat16": "bfloat16"}


def swap_backend(
    module: nn.Module,
    algos: dict[str, Any] | str | None = None,
    sample_input_shape: Sequence[int] | None = None,
    *,
    dtype: torch.dtype | str | None = None,
    fallback: str | None = None,
    fuse: bool = True,
) -> Model:
    """Convert ``module`` (in eval mode) into an ``algoswap.Model`` that runs every node through the registry.

    ``algos`` maps op names ("conv2d", "linear", "maxpool2d", "add", ...) to a selector, as for
    ``swap_operation``: a request string; a list of them, one per step of that op in forward order;
    a dict from module name ("layer1.0.conv1") or fx node name ("relu_1") to request; or a
    function of the module (or of the module and its input shape, batch included). Steps that call no
    module (``F.relu``, ``torch.cat``, ``x.view``, ``+``) give functions a ``FunctionalCall``
    (``.name``, ``.target``, ``.op``, ``.attrs``). A single string applies to every op. Ops not
    named use "default" (a layer already swapped by ``swap_operation`` keeps its request).

    ``sample_input_shape`` (batch included) runs the module once in PyTorch (shape propagation):
    function selectors then see input shapes, and every step's implementation is selected and
    checked now (errors name the node). Without it, selection happens at the first call.

    ``dtype`` (None: the module's; torch.float32/float64/bfloat16 or their names) is the dtype of
    the weights and of the computation; inputs are cast to it. ``fallback="torch"`` runs the nodes
    no registry op serves in PyTorch instead of refusing the model (``explain()`` lists them).

    ``fuse`` (default True): a conv2d whose output feeds only an add and/or a relu runs with them as
    one ``conv2d_fused`` call where the conv2d's implementation has such a twin (oneDNN post-ops);
    ``explain()`` shows each fused chain, or why it stayed unfused.
    """
    if not isinstance(module, nn.Module):
        raise ConversionError(f"{CALLER}: expected a torch.nn.Module, got {type(module).__name__}")
    _check_eval(module)
    compute = _compute_dtype(module, dtype)
    if fallback not in (None, "torch"):
        raise ConversionError(f"{CALLER}: fallback must be None or 'torch'; got {fallback!r}")
    traced = _trace(module)
    if sample_input_shape is not None:
        _propagate(traced, module, tuple(sample_input_shape))
    graph = ModelBuilder(CALLER, traced, compute, fallback == "torch").build()
    _assign_requests(graph, algos, sample_input_shape is not None)
    chains = find_chains(_outputs(graph)) if fuse else []
    model = Model(graph.inputs, graph.input_names, graph.output, graph.nodes, compute, chains, fallback == "torch")
    if sample_input_shape is not None:
        _preselect(model, graph, tuple(sample_input_shape))
    return model


def _outputs(graph: ModelGraph) -> list[Node]:
    return _output_nodes(graph.output)


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
            raise ConversionError(f"{CALLER}: the module's weights are {found}; pass dtype=torch.float32, torch.float64 or torch.bfloat16")
        return _DTYPES[found]
    if not isinstance(dtype, (str, torch.dtype)) or dtype not in _DTYPES:
        raise ConversionError(f"{CALLER}: dtype must be None, torch.float32, torch.float64, torch.bfloat16 or one of their "
                              f"names; got {dtype!r}")
    return _DTYPES[dtype]


class _Tracer(fx.Tracer):
    """torch.fx's tracer, with layers swapped by ``swap_operation`` kept as leaves (their op is known)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, SwappedModule) or super().is_leaf_module(m, module_qualified_name)


def _trace(module: nn.Module) -> fx.GraphModule:
    try:
        graph = _Tracer().trace(module)
    except Exception as exc:
        raise ConversionError(
            f"{CALLER}: torch.fx cannot trace {type(module).__name__} ({type(exc).__name__}: {exc}); "
            "the model's forward must be traceable by torch.fx.symbolic_trace (no control flow on tensor values)"
        ) from exc
    return fx.GraphModule(module, graph)


class _Recorder(ShapeProp):
    """Shape propagation that also keeps the Python values (sizes) computed in forward."""

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if not isinstance(result, torch.Tensor):
            n.meta["algoswap_value"] = result
        return result


def _propagate(traced: fx.GraphModule, module: nn.Module, shape: tuple[int, ...]) -> None:
    tensors = [*module.parameters(), *module.buffers()]
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    device = next((t.device for t in tensors), torch.device("cpu"))
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints the traceback itself
            _Recorder(traced).propagate(torch.randn(shape, dtype=dtype, device=device))
    except Exception as exc:
        cause = exc.__cause__ or exc
        raise ConversionError(f"{CALLER}: running the module on a sample input of shape {shape} failed: {type(cause).__name__}: {cause}") from exc


# ---------------------------------------------------------------------------- requests


def _assign_requests(graph: ModelGraph, algos: dict[str, Any] | str | None, shapes_known: bool) -> None:
    steps = [n for n in graph.nodes if n.kind == "op"]
    if algos is None:
        return
    if isinstance(algos, str):
        algos = {op: algos for op in dict.fromkeys(str(s.op) for s in steps)}
    if not isinstance(algos, dict):
        raise SelectorError(f"{CALLER}: algos must be a dict from op name to selector (or one request string); got {type(algos).__name__}")
    ops = get_registry().ops
    for op, selector in algos.items():
        if op not in ops:
            raise SelectorError(f"{CALLER}: algos names no op {op!r}{suggest(str(op), ops)} (ops of this model: {', '.join(sorted({str(s.op) for s in steps}))})")
        chosen = [s for s in steps if s.op == op]
        for step, request in zip(chosen, _requests(op, chosen, selector, graph, shapes_known)):
            _check(op, step, request, graph.input_shapes.get(step.name))
            step.request = request


def _module_of(node: Node) -> str | None:
    return node.source.module if isinstance(node.source, Origin) else None


def _requests(op: str, steps: list[Node], selector: Any, graph: ModelGraph, shapes_known: bool) -> list[Any]:
    if selector is None or isinstance(selector, str):
        return [selector or "default"] * len(steps)
    if isinstance(selector, dict):
        known = {m for s in steps if (m := _module_of(s))} | {s.name for s in steps}
        unknown = [name for name in selector if name not in known]
        if unknown:
            raise SelectorError(f"{CALLER}: no {op} step named {', '.join(map(repr, unknown))}; {op} steps (module or node names): {', '.join(sorted(known))}")
        return [next((selector[key] for key in (_module_of(s), s.name) if key in selector), s.request) for s in steps]
    if isinstance(selector, (list, tuple)):
        if len(selector) != len(steps):
            names = ", ".join(_module_of(s) or s.name for s in steps)
            raise SelectorError(f"{CALLER}: got {len(selector)} algorithms for {len(steps)} {op} steps (in forward order: {names})")
        return list(selector)
    if callable(selector):
        return [_from_function(op, s, selector, graph, shapes_known) for s in steps]
    raise SelectorError(f"{CALLER}: the {op} selector must be a string, a list, a dict or a function; got {type(selector).__name__}")


def _from_function(op: str, step: Node, function: Callable[..., Any], graph: ModelGraph, shapes_known: bool) -> Any:
    subject = graph.subjects[step.name]
    where = f"{CALLER}: {op} step {_module_of(step) or step.name!r}"
    args: tuple[Any, ...] = (subject,)
    if _positional_count(function) >= 2:
        shape = graph.input_shapes.get(step.name)
        if not shapes_known or shape is None:
            raise SelectorError(f"{where}: the selector takes the input shape; pass sample_input_shape (batch included)")
        args = (subject, shape)
    try:
        return function(*args)
    except AlgoswapError:
        raise
    except Exception as exc:
        raise SelectorError(f"{where}: the selector raised {type(exc).__name__}: {exc}") from exc


def _where(op: str, step: Node, shape: Any) -> str:
    module = _module_of(step)
    name = f"{step.name!r}" + (f" (module {module!r})" if module and module.replace(".", "_") != step.name else "")
    return f"{CALLER}: node {name} ({op}" + (f", input {shape})" if shape else ")")


def _check(op: str, step: Node, request: Any, shape: Any) -> None:
    if not isinstance(request, str):
        raise SelectorError(f"{_where(op, step, shape)}: the selector returned {request!r}; expected a string such as 'default' or 'numpy:smm'")
    try:
        check_known(get_registry(), op, request)
    except AlgoswapError as exc:
        raise SelectorError(f"{_where(op, step, shape)}: {exc}") from None


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
            raise error(f"{_where(str(node.op), node, graph.input_shapes.get(node.name))}: {detail}") from None
        raise error(f"{CALLER}: {text}") from None


__all__ = ["ConversionError", "FunctionalCall", "Model", "UnsupportedModelError", "UnsupportedNode", "convert", "swap_backend"]
