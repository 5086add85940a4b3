"""How a torch model becomes the fx graph that ``swap_backend`` lowers: ``torch.fx`` symbolic tracing, or
``torch.export`` at the sample input.

Symbolic tracing keeps the model's sizes symbolic (one conversion serves every input shape) and its
layers as modules (selectors by layer name see them), but it cannot follow Python that branches on
sizes. ``torch.export`` runs the model's Python at the sample input and records what it did: every
size becomes a number (the batch size stays symbolic where the model allows it), and values computed
from weights, constants and sizes alone (positional encodings, masks, index tables) become
computations on constants, which lowering folds. Its ATen graph is rewritten here into the torch
functions and methods the lowering tables know (``from_aten``); the layer of each node is kept from
export's module stack.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import warnings
from typing import Any

import torch
from torch import fx, nn

from .custom import SWAPPED_WITH
from .errors import ConversionError
from .from_aten import to_torch_functions
from .modules import SwappedModule

EXPORTED_FROM = "algoswap_exported_from"  # the GraphModule's meta: the module torch.export captured
FX = "torch.fx"
EXPORT = "torch.export"
TRACERS = (FX, EXPORT)


class _Tracer(fx.Tracer):
    """torch.fx's tracer, with layers swapped by ``swap_operation`` kept as leaves (their op is known), and
    those a ``swap_with`` class made (they run as written)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        swapped = isinstance(m, SwappedModule) or SWAPPED_WITH in m.__dict__
        return swapped or super().is_leaf_module(m, module_qualified_name)


class TraceFailed(ConversionError):
    """torch.fx could not trace the model (``torch.export`` may still capture it)."""


def symbolic_trace(caller: str, module: nn.Module) -> fx.GraphModule:
    """The module traced with the defaults of its forward's optional arguments (``attn_mask=None``):
    code that branches on them takes the default's branch, and the Model's inputs are the others."""
    try:
        graph = _Tracer().trace(module, concrete_args=_defaults(module) or None)
    except Exception as exc:
        hint = _ITERATED if "cannot be iterated" in str(exc) else ""
        raise TraceFailed(
            f"{caller}: torch.fx cannot trace {type(module).__name__} ({type(exc).__name__}: {exc}); "
            f"the model's forward must be traceable by torch.fx.symbolic_trace (no control flow on tensor values){hint}; "
            "give a sample_input_shape and torch.export captures it at that shape"
        ) from exc
    return fx.GraphModule(module, graph)


_ITERATED = ("; a loop over what a call returns (for p in torch.split(x, 2, 1)) has a length torch.fx does not know when "
             "tracing: unpack it (a, b = torch.split(x, 2, 1)) or take its items by index")


def _defaults(module: nn.Module) -> dict[str, Any]:
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def export(caller: str, module: nn.Module, sample: torch.Tensor, dynamic_batch: bool) -> fx.GraphModule:
    """The module captured by ``torch.export`` at ``sample`` (non-strict: its Python runs as written), in
    torch functions; the batch size symbolic if ``dynamic_batch`` and the model allows it, every other
    size fixed (a guard refuses other shapes)."""
    dims = ({0: torch.export.Dim.AUTO},) if dynamic_batch else None
    try:
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.export.export(module, (sample,), dynamic_shapes=dims, strict=False)
            if _writes_into_views(program.graph):
                program = program.run_decompositions({})  # functional: x[:, a:b] = v becomes slice_scatter
            graph = program.module()
    except Exception as exc:
        raise ConversionError(f"{caller}: torch.export cannot capture {type(module).__name__} at input shape "
                              f"{tuple(sample.shape)} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
    to_torch_functions(graph, tuple(sample.shape))
    graph.meta[EXPORTED_FROM] = module  # its layers, by the names export's module stack gives
    return graph


def _writes_into_views(graph: fx.Graph) -> bool:
    """Whether the training IR copies into a tensor in place (``x[:, 1:] = v``: ``aten.copy_`` of a view)."""
    return any(n.op == "call_function" and getattr(n.target, "_opname", "") == "copy_" for n in graph.nodes)


__all__ = ["EXPORT", "EXPORTED_FROM", "FX", "TRACERS", "TraceFailed", "export", "symbolic_trace"]
