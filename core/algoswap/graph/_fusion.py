"""Fusion chains: a conv2d with the add and/or activation that alone consume its output, run as one
``conv2d_fused`` call where the backend serving the convolution has one that fuses them (oneDNN
post-ops, one CuPy element-wise pass after cuDNN). The activations are conv2d_fused's
(``FUSED_ACTIVATIONS``): relu, relu6 (a hardtanh from 0 to 6), silu, hardswish and exact gelu.

Chains are found once, on the graph (``find_chains``); whether one runs fused is decided when the
program is planned, before anything of it is selected: the fused twin is selected first, and the
members are selected one by one only where it cannot serve (a backend that cannot fuse the
activation refuses the call; ``explain`` says why). An add or activation with a request of its own
(not "default" or "auto", nor the default of the convolution's backend) is never taken into a
chain: it runs as asked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from .._specs.conv import FUSED_ACTIVATIONS
from ._node import Node, topological

FUSABLE_REQUESTS = ("default", "auto")


def fused_activation(node: Node) -> str | None:
    """The conv2d_fused activation an op node computes ("relu6" for a hardtanh from 0 to 6), or None."""
    for name, (op, attrs) in FUSED_ACTIVATIONS.items():
        if node.op == op and all(node.attrs.get(key) == value for key, value in attrs.items()):
            return name
    return None


@dataclass(frozen=True, eq=False)
class Chain:
    """conv2d → [add residual] → [activation], whose intermediate values have no other reader."""

    conv: Node
    add: Node | None
    activation: Node | None  # a node computing one of FUSED_ACTIVATIONS
    residual: Node | None  # the add's other operand

    @property
    def members(self) -> tuple[Node, ...]:
        return tuple(n for n in (self.conv, self.add, self.activation) if n is not None)

    @property
    def last(self) -> Node:
        return self.members[-1]

    @property
    def activation_name(self) -> str:
        """conv2d_fused's activation: "none", "relu", "relu6", "silu", "hardswish" or "gelu"."""
        return "none" if self.activation is None else str(fused_activation(self.activation))

    @property
    def label(self) -> str:
        """"conv2d+add+relu", "conv2d+relu6" and the like (the activation by its conv2d_fused name)."""
        parts = [str(self.conv.op)] + (["add"] if self.add is not None else [])
        return "+".join(parts + ([self.activation_name] if self.activation is not None else []))

    @property
    def name(self) -> str:
        return self.conv.name

    def fused_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {**attrs, "activation": self.activation_name}


def find_chains(outputs: Sequence[Node]) -> list[Chain]:
    """Every conv2d → [add] → [activation] chain of the graph (an add joins one chain)."""
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


def _sole_consumer(node: Node, readers: Counter[int], consumer: dict[int, Node], conv: Node) -> Node | None:
    """The op node that alone reads ``node``, where it may join ``conv``'s chain."""
    nxt = consumer.get(id(node))
    if readers[id(node)] != 1 or nxt is None or nxt.kind != "op" or nxt.needs:
        return None
    return nxt if _fusable(nxt.request, conv.request) else None


def _chain(conv: Node, readers: Counter[int], consumer: dict[int, Node]) -> Chain | None:
    add = _sole_consumer(conv, readers, consumer, conv)
    residual = None
    if add is not None:
        others = [i for i in add.inputs if i is not conv]
        if add.op != "add" or len(others) != 1 or others[0] is None:
            add = None  # not an add, x + x, or an odd add
        else:
            residual = others[0]
    activation = _sole_consumer(add or conv, readers, consumer, conv)
    if activation is not None and fused_activation(activation) is None:
        activation = None
    if add is None and activation is None:
        return None
    return Chain(conv, add, activation, residual)
