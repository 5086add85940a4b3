"""In-place ops of a traced model (``y.add_(1)``, ``x += y``, ``nn.ReLU(inplace=True)``).

Lowered ops make new values, and torch.fx records an in-place call as a node whose value is the
changed tensor while later code may go on naming the old node. So, before lowering, every reader
of the changed tensor after the in-place node is made to read that node instead: the graph then
means what PyTorch computes. That is not enough where the change is seen through another name
(a view of the tensor, or the tensor it views, read afterwards) or outlives the call (a weight or
buffer of the model): those conversions are refused (``InPlaceError``), with or without fallback.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any

import torch
from torch import fx, nn

from .errors import ConversionError
from .lowered import target_name

_IN_PLACE_OPERATORS = (operator.iadd, operator.isub, operator.imul, operator.itruediv)
_VIEW_METHODS = {"view", "view_as", "reshape", "reshape_as", "permute", "transpose", "swapaxes", "swapdims", "t",
                 "expand", "expand_as", "flatten", "unflatten", "unsqueeze", "squeeze", "narrow", "select", "chunk",
                 "split", "unbind", "contiguous", "detach", "movedim", "diagonal", "as_strided", "unfold"}
_VIEW_FUNCTIONS = {operator.getitem, torch.reshape, torch.permute, torch.transpose, torch.swapaxes, torch.swapdims,
                   torch.flatten, torch.unflatten, torch.squeeze, torch.unsqueeze, torch.narrow, torch.select, torch.chunk,
                   torch.split, torch.unbind, torch.t, torch.movedim, torch.diagonal}
_VIEW_MODULES = (nn.Identity, nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


IN_PLACE = "algoswap_in_place"  # an fx node's meta: its call (an ATen op's out-of-place twin) changes its first argument


class InPlaceError(ConversionError):
    """An in-place change a converted model cannot reproduce (seen through a view, or kept across calls)."""


def mutates(node: fx.Node, root: nn.Module) -> bool:
    """Whether ``node`` changes its first argument in place."""
    if node.meta.get(IN_PLACE):
        return True
    if node.op == "call_method":
        return str(node.target).endswith("_") and not str(node.target).startswith("_")
    if node.op == "call_module":
        return getattr(root.get_submodule(str(node.target)), "inplace", False) is True
    if node.op != "call_function":
        return False
    if node.target in _IN_PLACE_OPERATORS or target_name(node.target).endswith("_"):
        return True
    return _bound(node).get("inplace") is True


def _bound(node: fx.Node) -> dict[str, Any]:
    """The call's arguments by name, where Python knows the function's signature (F.relu(x, True))."""
    try:
        return dict(inspect.signature(node.target).bind(*node.args, **node.kwargs).arguments)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}


def _is_view(node: fx.Node, root: nn.Module) -> bool:
    if node.op == "call_method":
        return str(node.target) in _VIEW_METHODS
    if node.op == "call_module":
        return isinstance(root.get_submodule(str(node.target)), _VIEW_MODULES)
    return node.op == "call_function" and node.target in _VIEW_FUNCTIONS


def _aliases(tensor: fx.Node, root: nn.Module) -> set[fx.Node]:
    """The nodes that may share ``tensor``'s memory: what it views (up the chain), and its views (down)."""
    found, stack = {tensor}, [tensor]
    base = tensor
    while _is_view(base, root) and base.args and isinstance(base.args[0], fx.Node):
        base = base.args[0]
        found.add(base)
        stack.append(base)
    while stack:
        for user in stack.pop().users:
            if user not in found and _is_view(user, root):
                found.add(user)
                stack.append(user)
    return found


def rewrite_in_place(graph: fx.Graph, root: nn.Module, caller: str) -> None:
    """Make the readers of each changed tensor after its in-place node read that node (see the module)."""
    order = {node: index for index, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if not mutates(node, root) or not node.args or not isinstance(node.args[0], fx.Node):
            continue
        changed = node.args[0]

        def later(value: fx.Node) -> list[fx.Node]:
            return [u for u in value.users if u is not node and order[u] > order[node]]

        if changed.op == "get_attr":
            raise InPlaceError(f"{caller}: node {node.name!r} changes the model's weight {changed.target!r} in place at every "
                               "call; a converted model's weights are fixed")
        seen = [a for a in _aliases(changed, root) - {changed} if order[a] < order[node] and later(a)]
        if seen:
            raise InPlaceError(f"{caller}: node {node.name!r} changes {changed.name!r} in place, and {seen[0].name!r}, which "
                               f"shares its memory, is read afterwards by {later(seen[0])[0].name!r}; lowered ops make new values")
        for user in later(changed):
            user.replace_input_with(changed, node)
