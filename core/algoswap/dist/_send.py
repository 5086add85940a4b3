"""Point-to-point in graphs: the two halves of the ``sendrecv`` op."""

from __future__ import annotations

from .._groups import WORLD
from ..graph import Node, op


def send(value: Node, to: int, group: str = WORLD) -> Node:
    """A node sending ``value`` to rank ``to`` of ``group`` (its value: zeros of the same shape). Its gradient
    is the one rank ``to`` sends back: on a pipeline stage that sends, ``g.gradients(send_node, params)``."""
    return op("sendrecv", value, send_to=to, group=group)


def recv(like: Node, source: int, group: str = WORLD) -> Node:
    """A node receiving from rank ``source`` an array of ``like``'s shape and dtype (``like``'s values are not
    read). Its gradient goes back to ``source``: ``g.gradients(loss, [*params, like])`` sends it."""
    return op("sendrecv", like, recv_from=source, group=group)
