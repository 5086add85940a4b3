"""The placement policy, stated once: which memory space serves a node.

- A value stays in the memory space where it was produced until a node that cannot read it there
  needs it; a transfer is then inserted (and shown by ``explain``).
- A request that names a backend ("cuda:default", "numpy:smm") or is "auto" runs where that backend
  (or the best-ranked one) works: the node's inputs move there.
- Any other request ("default", an algorithm name) serves the node from the memory space of its
  inputs (a device's, where its computed inputs are in host and device memory), never from another: a host backend serves device-resident data only when the request
  names it. Where nothing there serves the node, it runs in PyTorch on the same device when the
  front end allows it (``fallback="torch"``) and has a torch twin for it; otherwise it is an error
  that names the node and every rejected candidate.
- A communication op (the ``comm`` family) that nothing serves in its inputs' device memory (a GPU host
  without NCCL) runs in host memory (gloo), its inputs moved there: it has no torch twin to fall back on.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._errors import AlgoswapError, NoImplementationError, OpArgumentError
from .._global import get_registry
from .._records import HOST, MemorySpace
from .._registry import Registry
from .._select import Selection, select
from .._specs import FAMILIES
from ._node import GraphError, Node

TORCH = "torch"  # a placement: the node runs in PyTorch, on the device of its inputs


def memory_for(request: str, where: MemorySpace) -> str | None:
    """The memory space a request is served from: None (anywhere; the data moves) for "auto" and
    for a request naming a backend, else the inputs' memory space."""
    return None if request == "auto" or ":" in request else where.name


def place(node: Node, requests: Sequence[str], shapes: list[Any], dtypes: list[Any], attrs: dict[str, Any],
          where: MemorySpace, torch_allowed: bool) -> Selection | str:
    """The selection serving ``node`` (the first of ``requests`` that can), or ``TORCH``."""
    try:
        served = first_serving(get_registry(), str(node.op), requests, [memory_for(r, where) for r in requests], shapes, dtypes, attrs)
    except OpArgumentError as exc:  # the call itself is wrong: its class says so; the node is named on it
        exc.node = node.name  # type: ignore[attr-defined]
        raise
    except AlgoswapError as exc:
        raise GraphError(f"node {node.name!r} ({node.op}): {exc}") from None
    if not isinstance(served, list):
        return served[1]
    if not where.is_host and str(node.op) in FAMILIES["comm"]:
        on_host = first_serving(get_registry(), str(node.op), requests, [HOST.name] * len(requests), shapes, dtypes, attrs)
        if not isinstance(on_host, list):
            return on_host[1]
    if torch_allowed:
        return TORCH
    hint = ""
    if not where.is_host:
        hint = (f"\nnothing serves it in {where.name} memory, where its inputs are: pass fallback='torch' to run it "
                f"in PyTorch on that device, or name a backend (e.g. 'numpy:default') to move its inputs there")
    raise GraphError(f"node {node.name!r} ({node.op}): " + "; ".join(served) + hint)


def first_serving(registry: Registry, op: str, requests: Sequence[str], memories: Sequence[str | None], shapes: list[Any],
                  dtypes: list[Any], attrs: dict[str, Any]) -> tuple[int, Selection] | list[str]:
    """The first of ``requests`` that serves the call, each from its memory space (None: any), with
    its position; else why each could not."""
    reasons: list[str] = []
    for position, (request, memory) in enumerate(zip(requests, memories)):
        try:
            return position, select(registry, op, shapes, dtypes, attrs, request, memory)
        except NoImplementationError as exc:
            reasons.append(str(exc))
    return reasons


def inputs_space(inputs: Sequence[Node | None], spaces: Sequence[MemorySpace | None]) -> MemorySpace:
    """Where a node's inputs are: a device's memory space where an input the graph computed (or was
    fed) is there, else the memory space of the first such input (weights and other stored arrays move
    to where the activations are), else of its first input. A value computed on the host from weights
    alone (ViT's class token broadcast over the batch) so moves to the device where it meets the
    activations, instead of pulling them, and everything after, onto the host."""
    computed = [space for node, space in zip(inputs, spaces)
                if node is not None and space is not None and node.kind not in ("parameter", "variable", "constant")]
    if computed:
        return next((space for space in computed if not space.is_host), computed[0])
    return next((space for space in spaces if space is not None), HOST)
