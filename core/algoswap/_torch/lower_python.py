"""Python values of a traced model: sizes, shapes, their arithmetic and comparisons, items of tuples,
and shape guards (``torch._assert``), which are folded into the plan rather than run as nodes.

A guard is checked when the Model is planned: on the sample input at conversion (and PyTorch ran it
there too, during shape propagation), and again for every new input shape, since each is planned
anew; a shape it refuses makes that call fail with the guard's message. Nothing of it runs per call.
"""

from __future__ import annotations

import builtins
import math
import operator
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx._symbolic_trace
from torch import fx

from .._errors import AlgoswapError
from .lower_elementwise import tensor_dtype
from .lowered import Alias, Constant, Handler, Lowered, Parts, PythonCall, Unsupported, signature, target_name

if TYPE_CHECKING:
    from .lowering import Lowerer


class GuardError(AlgoswapError, ValueError):
    """A shape guard of the model (``torch._assert``) refused an input."""


# Python-value functions of python nodes (module-level, so that models pickle). Arrays stand for
# their shapes: when planning they are ``Shaped``, which has ``shape`` and ``ndim`` too.


def size_of(array: Any, dim: int | None = None) -> Any:
    """``Tensor.size(dim)`` of an array: its shape as a tuple, or one size."""
    return tuple(array.shape) if dim is None else int(array.shape[dim])


def shape_of(array: Any) -> tuple[int, ...]:
    """``Tensor.shape`` of an array."""
    return tuple(array.shape)


def ndim_of(array: Any) -> int:
    """``Tensor.dim()`` / ``Tensor.ndim`` of an array."""
    return len(array.shape)


def numel_of(array: Any) -> int:
    """``Tensor.numel()`` of an array."""
    count = 1
    for size in array.shape:
        count *= int(size)
    return count


SHAPE_READERS = (size_of, shape_of, ndim_of, numel_of)  # functions of an array's shape alone


def check_guard(condition: Any, message: Any = "") -> None:
    """``torch._assert(condition, message)`` on Python values."""
    if not condition:
        raise GuardError(f"the model's guard failed: {message}")


def check_is_none(value: Any, message: Any = "") -> None:
    """torch.fx's guard on an argument it specialised to None."""
    if value is not None:
        raise GuardError(f"the model's guard failed: {message}")


def check_captured_shape(array: Any, sizes: tuple[int | None, ...]) -> None:
    """The input shape a model captured by ``torch.export`` takes: its fixed ``sizes`` (None: any)."""
    shape = tuple(array.shape)
    if len(shape) != len(sizes) or any(want is not None and want != got for want, got in zip(sizes, shape)):
        shown = "(" + ", ".join("*" if s is None else str(s) for s in sizes) + ")" + (" (* any size)" if None in sizes else "")
        raise GuardError(f"the model was captured by torch.export with input shape {shown}; it cannot run an "
                         f"input of shape {shape}: convert it again with that sample_input_shape")


PYTHON_OPERATORS: dict[Any, Callable[..., Any]] = {
    f: f for f in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
                   operator.pow, operator.neg, operator.getitem, operator.iadd, operator.imul, operator.eq,
                   operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.not_, operator.and_,
                   operator.or_, operator.truth, math.ceil, math.floor, math.trunc, math.sqrt, operator.abs,
                   builtins.abs)  # the math functions torch.fx records
}
_TENSOR_ARITHMETIC = (operator.add, operator.iadd, operator.sub, operator.mul, operator.imul, operator.truediv,
                      operator.pow, operator.neg, operator.getitem)  # lowered by the tensor tables when given tensors


def python_only(function: Callable[..., Any]) -> Handler:
    """A rule for a function of Python values only (comparisons of sizes)."""

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        if node.kwargs or not all(lw.is_python(a) for a in node.args):
            raise Unsupported(f"{target_name(function)} of tensors has no registry op")
        return PythonCall(function, tuple(node.args))

    return handler


def python_getitem(lw: Lowerer, node: fx.Node) -> Lowered | None:
    """An item of a Python value (``x.shape[1]``), of a tuple-valued node (``q, k, v = x.unbind(0)``) or
    of a fallback node's tuple (``torch.sort(x)[0]``); None: an index into a tensor."""
    container, index = node.args[0], node.args[1]
    lowered = lw.results.get(container) if isinstance(container, fx.Node) else None
    if isinstance(lowered, Parts):
        return lowered.item(int(index))  # type: ignore[arg-type]
    if lw.is_python(container):
        return PythonCall(operator.getitem, tuple(node.args))
    if lw.is_tensor(container):
        return None
    if not isinstance(index, int):
        raise Unsupported("indexing the result of a node PyTorch runs with something other than an int")
    return PythonCall(operator.getitem, tuple(node.args), python_result=False)


_TENSOR_ATTRIBUTES = {"shape": shape_of, "ndim": ndim_of}


_FIELDS = frozenset(f for kind in torch.return_types.all_return_types for f in getattr(kind, "__match_args__", ()))  # .values, .U, ...


def _getattr(lw: Lowerer, node: fx.Node) -> Lowered:
    """``obj.name``: of a Python value (torch's named tuple included), of a tuple-valued node (``x.max(1).values``),
    a tensor's shape or transpose; of a value PyTorch computes (its kind unknown without a sample input), a
    field of torch's named tuples."""
    obj, name = node.args[0], node.args[1]
    lowered = lw.results.get(obj) if isinstance(obj, fx.Node) else None
    if isinstance(lowered, Parts) and name in lowered.fields:
        return lowered.item(lowered.fields.index(str(name)))
    if lw.is_python(obj):
        return PythonCall(builtins.getattr, (obj, name))
    if name in _FIELDS and not lw.is_tensor(obj):
        return PythonCall(builtins.getattr, (obj, name), python_result=False)
    if name in _TENSOR_ATTRIBUTES:
        return PythonCall(_TENSOR_ATTRIBUTES[str(name)], (obj,))
    if name == "dtype":
        return tensor_dtype(lw, obj)
    if name == "device":
        return Constant(_device(lw, obj))
    from .lower_shapes import tensor_attribute  # x.T, x.mT: data movement

    return tensor_attribute(lw, obj, str(name))


def _device(lw: Lowerer, x: Any) -> torch.device:
    """``x.device``: where torch computed ``x`` at conversion (the model's device), for the calls that make tensors
    beside it; values computed from it are constants of the Model, which places its values itself."""
    value = lw.constants.get(x, x) if isinstance(x, fx.Node) else x
    if isinstance(value, torch.Tensor):
        return value.device
    seen = getattr(value.meta.get("val"), "device", None) if isinstance(value, fx.Node) else None
    weights = (t.device for t in (*lw.root.parameters(), *lw.root.buffers()))
    return seen if seen is not None else next(weights, torch.device("cpu"))


def _size(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("self", dim=None), node)
    return PythonCall(size_of, (bound["self"], bound["dim"]))


def _guard(function: Callable[..., Any]) -> Handler:
    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(signature("condition", message=""), node)
        if not lw.is_python(bound["condition"]):
            raise Unsupported("a guard on tensor values (not on sizes) is checked only by running it")
        return PythonCall(function, (bound["condition"], bound["message"]), guard=True)

    return handler


def method_alias(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.contiguous()``, ``x.detach()``, ``x.clone()``: the same values (lowered ops never write their inputs)."""
    return Alias(node.args[0])


FUNCTIONS: dict[Any, Handler] = {
    builtins.getattr: _getattr,
    torch._assert: _guard(check_guard),
    torch.fx._symbolic_trace._assert_is_none: _guard(check_is_none),
    check_captured_shape: lambda lw, node: PythonCall(check_captured_shape, tuple(node.args), guard=True),
    **{f: python_only(f) for f in PYTHON_OPERATORS if f not in _TENSOR_ARITHMETIC},
}

METHODS: dict[str, Handler] = {
    "size": _size,
    "dim": lambda lw, node: PythonCall(ndim_of, (node.args[0],)),
    "numel": lambda lw, node: PythonCall(numel_of, (node.args[0],)),
    "contiguous": method_alias,
    "detach": method_alias,
    "clone": method_alias,
}
