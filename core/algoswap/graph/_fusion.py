"""Fusion chains: an op with a fused twin (the chain's head) and the add and/or activation that alone
consume its output, run as one call of the twin where the backend serving the head has one that fuses
them. A conv2d's twin is ``conv2d_fused`` (a residual add and an activation: oneDNN post-ops, one CuPy
element-wise pass after cuDNN); an inference batchnorm2d's is ``batchnorm2d_fused`` (an activation:
DenseNet's batch norm → relu pre-activations; oneDNN's batch normalization with the relu fused, one CuPy
pass). The activations are the twins' ``FUSED_ACTIVATIONS``: relu, relu6 (a hardtanh from 0 to 6), silu,
hardswish and exact gelu.

Chains are found once, on the graph (``find_chains``); whether one runs fused is decided when the
program is planned, before anything of it is selected: the fused twin is selected first, and the
members are selected one by one only where it cannot serve (a backend that cannot fuse the
activation refuses the call; ``explain`` says why). An add or activation with a request of its own
(not "default" or "auto", nor the default of the head's backend) is never taken into a
chain: it runs as asked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from .._spec import OpSpec
from .._specs.conv import FUSED_ACTIVATIONS, conv2d_fused
from .._specs.norm import batchnorm2d_fused
from ._node import Node, dependencies, topological


@dataclass(frozen=True)
class Twin:
    """The fused op a chain's head runs as, and what ``explain`` says its members are fused into."""

    spec: OpSpec  # the head's inputs (then "residual", where an add may join), and an "activation" attribute
    into: str

    @property
    def takes_residual(self) -> bool:
        return "residual" in self.spec.input_names


# a chain's head op -> its fused twin
TWINS: Mapping[str, Twin] = MappingProxyType({
    "conv2d": Twin(conv2d_fused, "the convolution"),
    "batchnorm2d": Twin(batchnorm2d_fused, "the batch norm"),
})
FUSABLE_REQUESTS = ("default", "auto")


def fused_activation(node: Node) -> str | None:
    """The fused twins' activation an op node computes ("relu6" for a hardtanh from 0 to 6), or None."""
    for name, (op, attrs) in FUSED_ACTIVATIONS.items():
        if node.op == op and all(node.attrs.get(key) == value for key, value in attrs.items()):
            return name
    return None


@dataclass(frozen=True, eq=False)
class Chain:
    """head → [add residual] → [activation], whose intermediate values have no other reader (an add only
    where the head's twin takes a residual)."""

    head: Node  # an op of TWINS
    add: Node | None
    activation: Node | None  # a node computing one of FUSED_ACTIVATIONS
    residual: Node | None  # the add's other operand

    @property
    def twin(self) -> Twin:
        return TWINS[str(self.head.op)]

    @property
    def members(self) -> tuple[Node, ...]:
        return tuple(n for n in (self.head, self.add, self.activation) if n is not None)

    @property
    def last(self) -> Node:
        return self.members[-1]

    @property
    def inputs(self) -> tuple[Node | None, ...]:
        """The twin's inputs: the head's, then the residual where the twin takes one."""
        return (*self.head.inputs, self.residual) if self.twin.takes_residual else tuple(self.head.inputs)

    @property
    def activation_name(self) -> str:
        """The twin's activation: "none", "relu", "relu6", "silu", "hardswish" or "gelu"."""
        return "none" if self.activation is None else str(fused_activation(self.activation))

    @property
    def label(self) -> str:
        """"conv2d+add+relu", "conv2d+relu6", "batchnorm2d+relu" and the like (the activation by its twin's name)."""
        parts = [str(self.head.op)] + (["add"] if self.add is not None else [])
        return "+".join(parts + ([self.activation_name] if self.activation is not None else []))

    @property
    def name(self) -> str:
        return self.head.name

    def fused_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {**attrs, "activation": self.activation_name}


def find_chains(outputs: Sequence[Node]) -> list[Chain]:
    """Every head → [add] → [activation] chain of the graph (an add joins one chain)."""
    order = topological(outputs)
    readers: Counter[int] = Counter(id(o) for o in outputs)
    consumer: dict[int, Node] = {}
    for node in order:
        for dep in dependencies(node):
            if dep is not None:
                readers[id(dep)] += 1
                consumer[id(dep)] = node
    chains: list[Chain] = []
    taken: set[int] = set()
    for node in order:
        if node.kind == "op" and node.op in TWINS and not node.needs:
            chain = _chain(node, readers, consumer)
            if chain is not None and not any(id(m) in taken for m in chain.members):
                chains.append(chain)
                taken.update(id(m) for m in chain.members)
    return chains


def _fusable(request: str, head_request: str) -> bool:
    """Whether a member asked for ``request`` may run inside the head's call: it asked for nothing in
    particular, or for the default of the backend the head asked for ("sycl:default" for a whole model)."""
    if request in FUSABLE_REQUESTS:
        return True
    backend, _, algorithm = request.partition(":")
    return algorithm == "default" and head_request.partition(":")[0] == backend


def _sole_consumer(node: Node, readers: Counter[int], consumer: dict[int, Node], head: Node) -> Node | None:
    """The op node that alone reads ``node``, where it may join ``head``'s chain."""
    nxt = consumer.get(id(node))
    if readers[id(node)] != 1 or nxt is None or nxt.kind != "op" or nxt.needs:
        return None
    return nxt if _fusable(nxt.request, head.request) else None


def _chain(head: Node, readers: Counter[int], consumer: dict[int, Node]) -> Chain | None:
    add = _sole_consumer(head, readers, consumer, head)
    residual = None
    if add is not None:
        others = [i for i in add.inputs if i is not head]
        if add.op != "add" or len(others) != 1 or others[0] is None or not TWINS[str(head.op)].takes_residual:
            add = None  # not an add, x + x, an odd add, or a head whose twin takes no residual
        else:
            residual = others[0]
    activation = _sole_consumer(add or head, readers, consumer, head)
    if activation is not None and fused_activation(activation) is None:
        activation = None
    if add is None and activation is None:
        return None
    return Chain(head, add, activation, residual)
