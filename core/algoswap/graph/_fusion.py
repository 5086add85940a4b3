"""Fusion chains: a conv2d with the add and/or relu that alone consume its output, run as one
``conv2d_fused`` call where the backend serving the convolution has one (oneDNN post-ops, one
CuPy element-wise pass after cuDNN).

Chains are found once, on the graph (``find_chains``); whether one runs fused is decided when the
program is planned, before anything of it is selected: the fused twin is selected first, and the
members are selected one by one only where it cannot serve (``explain`` says why). An add or relu
with a request of its own (not "default" or "auto", nor the default of the convolution's backend)
is never taken into a chain: it runs as asked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from ._node import Node, topological

FUSABLE_REQUESTS = ("default", "auto")


@dataclass(frozen=True, eq=False)
class Chain:
    """conv2d → [add residual] → [relu], whose intermediate values have no other reader."""

    conv: Node
    add: Node | None
    relu: Node | None
    residual: Node | None  # the add's other operand

    @property
    def members(self) -> tuple[Node, ...]:
        return tuple(n for n in (self.conv, self.add, self.relu) if n is not None)

    @property
    def last(self) -> Node:
        return self.members[-1]

    @property
    def label(self) -> str:
        """"conv2d+add+relu" and the like."""
        return "+".join(str(n.op) for n in self.members)

    @property
    def name(self) -> str:
        return self.conv.name

    def fused_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {**attrs, "activation": "relu" if self.relu is not None else "none"}


def find_chains(outputs: Sequence[Node]) -> list[Chain]:
    """Every conv2d → [add] → [relu] chain of the graph (an add joins one chain)."""
    order = topological(outputs)
    readers: Counter[int] = Counter(id(o) for o in outputs)
    consumer: dict[int, Node] = {}
    for node in order:
        for dep in (*node.inputs, *node.needs):
            if dep is not None:
                readers[id(dep)] += 1
                consumer[id(dep)] = node
    chains: list[Chain] = []
    taken: set[int] = set()
    for node in order:
        if node.kind == "op" and node.op == "conv2d" and not node.needs:
            chain = _chain(node, readers, consumer)
            if chain is not None and not any(id(m) in taken for m in chain.members):
                chains.append(chain)
                taken.update(id(m) for m in chain.members)
    return chains


def _fusable(request: str, conv_request: str) -> bool:
    """Whether a member asked for ``request`` may run inside the conv2d's call: it asked for nothing in
    particular, or for the default of the backend the conv2d asked for ("sycl:default" for a whole model)."""
    if request in FUSABLE_REQUESTS:
        return True
    backend, _, algorithm = request.partition(":")
    return algorithm == "default" and conv_request.partition(":")[0] == backend


def _sole_consumer(node: Node, readers: Counter[int], consumer: dict[int, Node], op: str, conv: Node) -> Node | None:
    nxt = consumer.get(id(node))
    if readers[id(node)] != 1 or nxt is None or nxt.kind != "op" or nxt.op != op or nxt.needs:
        return None
    return nxt if _fusable(nxt.request, conv.request) else None


def _chain(conv: Node, readers: Counter[int], consumer: dict[int, Node]) -> Chain | None:
    add = _sole_consumer(conv, readers, consumer, "add", conv)
    residual = None
    if add is not None:
        others = [i for i in add.inputs if i is not conv]
        if len(others) != 1 or others[0] is None:
            add = None  # x + x, or an odd add
        else:
            residual = others[0]
    relu = _sole_consumer(add or conv, readers, consumer, "relu", conv)
    if add is None and relu is None:
        return None
    return Chain(conv, add, relu, residual)
