"""An executor's training state as plain data: what a checkpoint holds, so that a run resumed from it
continues exactly as the uninterrupted run would have.

The state is ``{"parameters": {name: array}, "variables": {name: array}, "steps": {update name: int},
"loaders": {"subgraph/i": loader state}}``: parameters, optimizer state (velocities, moments), the step
counts of updates that keep one (Adam's), and each data loader's position in its epoch, its epoch's order
and its random generator's state. Names must be unique among the nodes of each kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from ._node import GraphError, Node, topological
from ._optim import StepCount

if TYPE_CHECKING:
    from ._executor import Executor

KINDS = ("parameters", "variables", "steps", "loaders")


def state_dict(executor: Executor) -> dict[str, Any]:
    """The executor's training state (copies: training on changes nothing in it)."""
    nodes = _nodes(executor)
    return {
        "parameters": {name: np.array(node.value, copy=True) for name, node in _named(nodes, "parameter").items()},
        "variables": {name: np.array(node.value, copy=True) for name, node in _named(nodes, "variable").items()},
        "steps": {name: node.dynamic.step for name, node in _counted(nodes).items()},  # type: ignore[union-attr]
        "loaders": {key: loader.state_dict() for key, loader in _loaders(executor)},
    }


def load_state_dict(executor: Executor, state: Mapping[str, Any], strict: bool = True) -> None:
    """Put ``state`` (from ``state_dict``) into the executor's nodes and loaders, values copied into the
    arrays the nodes hold. ``strict``: every name of either side must be on the other."""
    nodes = _nodes(executor)
    targets: dict[str, Mapping[str, Any]] = {
        "parameters": _named(nodes, "parameter"), "variables": _named(nodes, "variable"), "steps": _counted(nodes),
        "loaders": dict(_loaders(executor)),
    }
    if strict:
        _check_names(state, targets)
    for kind in ("parameters", "variables"):
        for name, value in state.get(kind, {}).items():
            if name in targets[kind]:
                _copy_into(targets[kind][name], value, kind)
    for name, step in state.get("steps", {}).items():
        if name in targets["steps"]:
            targets["steps"][name].dynamic.step = int(step)
    for key, loader_state in state.get("loaders", {}).items():
        if key in targets["loaders"]:
            targets["loaders"][key].load_state_dict(loader_state)


def _nodes(executor: Executor) -> list[Node]:
    return topological([n for outputs in executor.subgraphs.values() for n in outputs])


def _named(nodes: list[Node], kind: str) -> dict[str, Node]:
    found: dict[str, Node] = {}
    for node in nodes:
        if node.kind != kind:
            continue
        if node.name in found:
            raise GraphError(f"state_dict: two {kind}s are named {node.name!r}: give them distinct names")
        found[node.name] = node
    return found


def _counted(nodes: list[Node]) -> dict[str, Node]:
    return {node.name: node for node in nodes if isinstance(node.dynamic, StepCount)}


def _loaders(executor: Executor) -> Iterator[tuple[str, Any]]:
    """("subgraph/i", loader): the distinct loaders feeding each subgraph, in graph order."""
    for subgraph, outputs in executor.subgraphs.items():
        seen: list[Any] = []
        for node in topological(outputs):
            loader = node.loaders.get(subgraph) if node.kind == "data" else None
            if loader is not None and all(loader is not other for other in seen):
                seen.append(loader)
                yield f"{subgraph}/{len(seen) - 1}", loader


def _check_names(state: Mapping[str, Any], targets: dict[str, Mapping[str, Any]]) -> None:
    problems = []
    for kind in KINDS:
        given, have = set(state.get(kind, {})), set(targets[kind])
        if given - have:
            problems.append(f"{kind} in the state but not in the graph: {', '.join(sorted(given - have))}")
        if have - given:
            problems.append(f"{kind} in the graph but not in the state: {', '.join(sorted(have - given))}")
    if problems:
        raise GraphError("load_state_dict: " + "; ".join(problems) + " (strict=False loads what matches)")


def _copy_into(node: Node, value: Any, kind: str) -> None:
    array = np.asarray(value)
    target = node.value
    if array.shape != target.shape or array.dtype != target.dtype:
        raise GraphError(f"load_state_dict: {kind[:-1]} {node.name!r} is {target.shape} {target.dtype} in the graph; "
                         f"the state has {array.shape} {array.dtype}")
    target[...] = array
