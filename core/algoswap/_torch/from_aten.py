"""``torch.export``'s ATen graph as the torch functions and methods the lowering tables know.

An ATen op ``aten.<name>.<overload>`` takes the arguments of its torch twin in the same order: it becomes
``torch.<name>``, ``torch.nn.functional.<name>`` or ``Tensor.<name>``, whichever a lowering rule serves.
``ADAPTED`` lists the ops whose arguments differ (batch_norm's order, layer_norm's ``cudnn_enable``,
slices and selects as indexing). An ATen op without a twin stays as it is: lowering folds it into a
constant where its inputs are constants (``cumsum`` of a mask), else it runs in PyTorch.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import fx

from .lower_in_place import IN_PLACE
from .lower_python import check_captured_shape

Twin = tuple[str, Any, tuple[Any, ...], dict[str, Any]]  # an fx node's (op, target, args, kwargs) in torch's terms
Adapter = Callable[..., "Twin | None"]  # an ATen op's arguments -> its twin (None: the ATen op stays)
_DROPPED = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "sym_constrain_range"}
_ALIASES = {"alias", "lift_fresh_copy", "detach_"}  # the same values
_FIRST_OF_TUPLE = {"_native_batch_norm_legit_no_training"}  # (output, saved statistics...): only the output is read


def _full_slice(dim: int) -> tuple[Any, ...]:
    return (slice(None),) * dim if dim >= 0 else (Ellipsis,) + (slice(None),) * (-dim - 1)


def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Twin:
    return "call_function", operator.getitem, (x, (*_full_slice(dim), slice(start, end, step))), {}


def _select(x: Any, dim: int, index: Any) -> Twin:
    return "call_function", operator.getitem, (x, (*_full_slice(dim), index)), {}


def _index(x: Any, indices: Any) -> Twin:
    """``aten.index(x, [None, idx])``: a None there leaves its dimension whole (in Python's indexing it adds one)."""
    return "call_function", operator.getitem, (x, tuple(slice(None) if i is None else i for i in indices)), {}


def _batch_norm(x: Any, weight: Any, bias: Any, mean: Any, var: Any, training: bool, momentum: float, eps: float,
                *_: Any) -> Twin:
    return "call_function", F.batch_norm, (x, mean, var, weight, bias, training, momentum, eps), {}


def _without_last(function: Callable[..., Any], count: int) -> Adapter:
    """``function`` with the ATen op's arguments less its ``count``-th and later (``cudnn_enable``)."""
    def adapt(*args: Any, **kwargs: Any) -> Twin:
        return "call_function", function, args[:count], {k: v for k, v in kwargs.items() if k != "cudnn_enable"}
    return adapt


def _resize(mode: str) -> Adapter:
    """``aten.upsample_<mode>2d.vec(x, output_size, [align_corners,] scale_factors)`` as ``F.interpolate``; the
    ``.default`` overloads (a scale per side) stay ATen ops."""
    def adapt(x: Any, size: Any, *rest: Any, **kwargs: Any) -> Twin | None:
        if kwargs or len(rest) != (1 if mode == "nearest" else 2):
            return None
        corners, scales = (None, rest[0]) if mode == "nearest" else (rest[0], rest[1])
        given = {"size": size} if size is not None else {"scale_factor": scales}
        return "call_function", F.interpolate, (x,), {**given, "mode": mode, "align_corners": corners}
    return adapt


def _elu(x: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Twin | None:
    """``aten.elu(x, alpha, scale, input_scale)``: F.elu(x, alpha) where both scales are 1 (F.elu's third argument
    is ``inplace``), else the ATen op stays."""
    return ("call_function", F.elu, (x, alpha), {}) if scale == 1 and input_scale == 1 else None


def _constant_pad(x: Any, pad: Any, value: float = 0.0) -> Twin:
    return "call_function", F.pad, (x, pad, "constant", value), {}


def _method(name: str, count: int | None = None, keep: tuple[str, ...] = ()) -> Adapter:
    """``Tensor.<name>`` with the ATen op's first ``count`` arguments (None: all) and its keywords in ``keep``."""
    def adapt(*args: Any, **kwargs: Any) -> Twin:
        return "call_method", name, args if count is None else args[:count], {k: v for k, v in kwargs.items() if k in keep}
    return adapt


ADAPTED: dict[str, Adapter] = {
    "slice": _slice,
    "select": _select,
    "index": _index,
    "batch_norm": _batch_norm,
    "_native_batch_norm_legit_no_training": lambda x, w, b, m, v, momentum, eps: _batch_norm(x, w, b, m, v, False, momentum, eps),
    "layer_norm": _without_last(F.layer_norm, 5),
    "group_norm": _without_last(F.group_norm, 5),
    "constant_pad_nd": _constant_pad,
    "upsample_nearest2d": _resize("nearest"),
    "upsample_bilinear2d": _resize("bilinear"),
    "upsample_bicubic2d": _resize("bicubic"),
    "linalg_vector_norm": lambda *args, **kwargs: ("call_function", torch.linalg.vector_norm, args, kwargs),
    "split_with_sizes": lambda *args, **kwargs: ("call_function", torch.split, args, kwargs),
    "copy": lambda x, src, *rest: ("call_method", "expand_as", (src, x), {}),  # functional copy_: src in x's shape
    "fill": lambda x, value: ("call_function", torch.full_like, (x, value), {}),  # functional fill_
    "elu": _elu,
    "instance_norm": lambda x, w, b, mean, var, use_input_stats, momentum, eps, *_: (
        "call_function", F.instance_norm, (x, mean, var, w, b, use_input_stats, momentum, eps), {}),
    "unfold": _method("unfold"),  # Tensor.unfold's windows, not F.unfold (which is ATen's im2col)
    "im2col": lambda *args, **kwargs: ("call_function", F.unfold, args, kwargs),
    "col2im": lambda *args, **kwargs: ("call_function", F.fold, args, kwargs),
    "sym_size": _method("size"),
    "sym_numel": _method("numel"),
    "expand": _method("expand", 2),
    "view": _method("reshape"),  # the same values; reshape also where torch.export's clones left a layout view refuses
    "_unsafe_view": _method("reshape"),
    "clone": _method("clone", 1),
    "contiguous": _method("contiguous", 1),
    "to": _method("to", None, ("dtype", "device", "non_blocking", "copy")),
    "_to_copy": _method("to", 1, ("dtype", "device")),
    "type_as": _method("type_as"),
    "t": _method("t"),
}


def to_torch_functions(graph: fx.GraphModule, shape: tuple[int, ...]) -> None:
    """Rewrite ``graph`` (``ExportedProgram.module()``) in place: ATen calls as their torch twins, export's
    own checks dropped, and a guard on the input's shape (the sizes export fixed) after the input."""
    from .lowering import FUNCTIONS, METHODS  # the tables say which twins lowering serves

    for node in list(graph.graph.nodes):
        if node.target is _AUTOCAST and node.args[2] is False:
            _inline(graph, node)
    for node in list(graph.graph.nodes):
        if node.op == "call_module" and str(node.target).startswith("_guards"):
            graph.graph.erase_node(node)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            _rewrite(graph.graph, node, FUNCTIONS, METHODS)
    _plain_output(graph.graph)
    graph.graph.eliminate_dead_code()
    _guard_input(graph.graph, shape)  # after: it is used by nothing
    graph.recompile()


_AUTOCAST = getattr(torch.ops.higher_order, "wrap_with_autocast", None)


def _inline(graph: fx.GraphModule, node: fx.Node) -> None:
    """A region of ``torch.autocast(enabled=False)`` (EfficientViT's attention in float32): export makes it a
    call of a submodule; its ops, which compute in the dtypes they name, are copied in its place."""
    name = str(node.args[4].target)  # type: ignore[union-attr]
    region: fx.GraphModule = getattr(graph, name)
    inputs = [n for n in region.graph.nodes if n.op == "placeholder"]
    before = set(graph.graph.nodes)
    with graph.graph.inserting_before(node):
        outputs = graph.graph.graph_copy(region.graph, dict(zip(inputs, node.args[5:])))  # type: ignore[arg-type]
    for copied in graph.graph.nodes:
        if copied not in before and copied.op == "get_attr":
            copied.target = f"{name}.{copied.target}"  # the region's weights, as attributes of its submodule
    for user in list(node.users):  # getitem readers of the region's outputs
        user.replace_all_uses_with(outputs[user.args[1]])  # type: ignore[index, arg-type]
        graph.graph.erase_node(user)
    graph.graph.erase_node(node)


def _rewrite(graph: fx.Graph, node: fx.Node, functions: dict[Any, Any], methods: dict[str, Any]) -> None:
    name = node.target._opname  # type: ignore[union-attr]
    if name in _DROPPED:
        graph.erase_node(node)
        return
    if name in _ALIASES:
        node.replace_all_uses_with(node.args[0])  # type: ignore[arg-type]
        graph.erase_node(node)
        return
    if name in _FIRST_OF_TUPLE:  # its twin returns the tensor alone: the readers of item 0 read the node
        for user in list(node.users):
            if user.target is operator.getitem and user.args[1] == 0:
                user.replace_all_uses_with(node)
                graph.erase_node(user)
    in_place = name.endswith("_") and not name.startswith("_")  # aten.hardswish_: the twin of hardswish, in place
    twin = _twin(name[:-1] if in_place else name, node, functions, methods)
    if twin is not None:
        node.op, node.target, node.args, node.kwargs = twin
        node.meta[IN_PLACE] = in_place


def _twin(name: str, node: fx.Node, functions: dict[Any, Any], methods: dict[str, Any]) -> Twin | None:
    if name in ADAPTED:
        return ADAPTED[name](*node.args, **node.kwargs)
    for space in (torch, F):
        function = getattr(space, name, None)
        if function is not None and _served(function, functions):
            return "call_function", function, node.args, dict(node.kwargs)
    if name in methods:
        return "call_method", name, node.args, dict(node.kwargs)
    return None


def _served(function: Any, functions: dict[Any, Any]) -> bool:
    try:
        return function in functions
    except TypeError:
        return False


def _plain_output(graph: fx.Graph) -> None:
    """The model's output as forward returns it (export's graph returns the flat list of its tensors, and
    its code generator rebuilds the structure), with plain code generation."""
    info = getattr(graph._codegen, "pytree_info", None)
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    if info is not None and info.out_spec is not None:
        output.args = (torch.utils._pytree.tree_unflatten(list(output.args[0]), info.out_spec),)
    graph._codegen = fx.graph.CodeGen()


def _guard_input(graph: fx.Graph, shape: tuple[int, ...]) -> None:
    """A shape guard after the (first) input: export fixed every size but the symbolic ones."""
    placeholder = next((n for n in graph.nodes if n.op == "placeholder"), None)
    if placeholder is None:
        return
    value = placeholder.meta.get("val")
    sizes = tuple(None if not isinstance(s, int) else int(s) for s in value.shape) if value is not None else shape
    with graph.inserting_after(placeholder):
        graph.call_function(check_captured_shape, (placeholder, sizes))


__all__ = ["ADAPTED", "to_torch_functions"]
