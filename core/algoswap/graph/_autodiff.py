"""Reverse-mode differentiation of a graph from the gradient rules of the op specs (``GradRule``)."""

from __future__ import annotations

from typing import Sequence

from .._global import get_registry
from .._spec import GradRule
from ._node import GraphError, Node, op, topological


def gradients(loss: Node, params: Sequence[Node]) -> list[Node]:
    """Nodes computing d(loss)/d(param) for every param (the loss summed first if it is not a scalar);
    a "param" may be any node the loss depends on (the gradient of an op node's output too).

    The backward graph calls the gradient ops each forward op's spec declares; the gradients of a
    node used several times are added. A param the loss does not depend on is an error.
    """
    order = topological([loss])
    needs = _depends_on(order, params)
    wanted = {id(p) for p in params}
    found: dict[int, Node] = {}
    pending: dict[int, list[Node]] = {id(loss): [op("ones_like", loss, name=f"grad_{loss.name}")]}
    for node in reversed(order):
        contributions = pending.pop(id(node), None)
        if contributions is None:
            continue
        total = _sum(node, contributions)
        if id(node) in wanted:  # a parameter, or any node whose gradient is asked for (a received activation)
            found[id(node)] = total
        if node.kind != "op":
            continue
        for name, item, source in _differentiable_inputs(node, needs):
            pending.setdefault(id(source), []).append(_gradient(node, name, item, source, total))
    missing = [p.name for p in params if id(p) not in found]
    if missing:
        raise GraphError(f"gradients: the loss {loss.name!r} does not depend on {', '.join(missing)}")
    return [found[id(p)] for p in params]


def _depends_on(order: list[Node], params: Sequence[Node]) -> set[int]:
    needs = {id(p) for p in params}
    for node in order:
        if any(i is not None and id(i) in needs for i in node.inputs):
            needs.add(id(node))
    return needs


def _sum(node: Node, contributions: list[Node]) -> Node:
    total = contributions[0]
    for index, more in enumerate(contributions[1:], start=1):
        total = op("add", total, more, name=f"grad_{node.name}_sum{index}")
    return total


def _differentiable_inputs(node: Node, needs: set[int]) -> list[tuple[str, int, Node]]:
    """(input name, item, source) of the inputs the loss reaches a parameter through; ``item`` numbers
    the arrays of a variadic input (0 for the others)."""
    assert node.call is not None and node.op is not None
    names = node.call.input_names
    found = []
    for position, (name, source) in enumerate(zip(names, node.inputs)):
        if source is not None and id(source) in needs:
            found.append((name, position - names.index(name), source))
    return found


def _rule(node: Node, name: str) -> GradRule:
    assert node.op is not None
    spec = get_registry().spec(node.op)
    for rule in spec.gradients:
        if rule.wrt == name:
            return rule
    declared = ", ".join(r.wrt for r in spec.gradients) or "none"
    raise GraphError(
        f"node {node.name!r} ({node.op}): no gradient rule for its input {name!r} (the spec declares gradients "
        f"for: {declared}); a parameter reaches the loss through it"
    )


def _gradient(node: Node, name: str, item: int, source: Node, grad_output: Node) -> Node:
    rule = _rule(node, name)
    assert node.call is not None
    label = f"grad_{source.name}_from_{node.name}" + (f"_{item}" if item else "")
    if rule.op is None:
        if grad_output.shape == source.shape:
            return grad_output
        return op("reshape", grad_output, shape=source.shape, name=label)
    arrays: list[Node | None] = []
    for wanted in rule.inputs:
        if wanted == "grad_output":
            arrays.append(grad_output)
        elif wanted == "output":
            arrays.append(node)
        else:
            arrays.append(node.inputs[node.call.input_names.index(wanted)])
    return op(rule.op, *arrays, name=label, **rule.attrs_for(node.call, item))
