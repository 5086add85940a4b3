"""What a Model's op steps ask for, as the request resolver sees them: each step as a ``Subject``, the
distributions that provided the backends their requests name (kept, so that a process missing one
can say what to install), and the message for requests a process cannot serve (a Model unpickled
where a backend it asked for is not installed)."""

from __future__ import annotations

from typing import Any, Sequence

from .._global import get_registry
from .._requests import Subject, refused
from .._select import parse_request
from .._spec import Shape
from ..graph._node import Node, Origin

SHOWN = 4  # layer names shown per refusal


def layer_of(node: Node) -> str | None:
    """The module an op node lowers, if any ("layer1.0.conv1")."""
    return node.source.module if isinstance(node.source, Origin) else None


def subject(node: Node, target: Any = None, input_shape: Shape | None = None) -> Subject:
    """The op node as the resolver sees it: named by its module (else its node), with the node's name as an
    alias; ``target`` is what a function selector receives (the node itself where None)."""
    module = layer_of(node)
    return Subject(str(node.op), module or node.name, node if target is None else target, input_shape,
                   aliases=(node.name,) if module else (), own=None if node.request == "default" else node.request,
                   noun="layer" if module else "node")


def providers(nodes: Sequence[Node]) -> dict[str, str]:
    """The distribution ("algoswap-dnnl 0.1.0") of each loaded backend the op nodes' requests name."""
    registry = get_registry()
    named = {parse_request(str(n.op), n.request)[0] for n in nodes if n.kind == "op"}
    return {name: registry.owner_of(name) for name in sorted(b for b in named if b is not None and b in registry.backends)}


def unserved(nodes: Sequence[Node], provided: dict[str, str]) -> str:
    """The op nodes' requests no implementation here serves, each with why and its layers; what provided
    the missing backends where the requests were made; and how to re-target them. Empty if none."""
    found = refused("algoswap.Model", [subject(n) for n in nodes if n.kind == "op"])
    if not found:
        return ""
    steps: dict[str, list[str]] = {}
    for who, why in found:
        why = why.removeprefix(f"{who.op}: ")  # one line for every op a missing backend was asked for
        steps.setdefault(why, []).append(f"{who.noun} {who.name!r} ({who.op})")
    lines = [f"  {why}\n    for {_names(names)}" for why, names in steps.items()]
    registry = get_registry()
    missing = [f"backend {name!r} came from {owner}" for name, owner in provided.items() if name not in registry.backends]
    where = f"Where the model was made, {', '.join(missing)}: install or enable it, or" if missing else "Install what is missing, or"
    return (f"algoswap.Model: {len(found)} step{'s' if len(found) != 1 else ''} ask for what no backend here serves:\n"
            + "\n".join(lines) + f"\n{where} re-target the model to what is here: model.retarget(\"default\") "
            "(or any selector of swap_backend's algorithm=, such as {\"conv2d\": \"numpy:default\"}).")


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
