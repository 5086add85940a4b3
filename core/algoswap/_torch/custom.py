"""``swap_with=``: a user's function as the implementation of swapped layers, registered like any other,
or a user's class whose instances replace the layers.

A function becomes the implementation ``<name>:custom`` of the op, on a backend of its own named
after the function (``my_conv`` -> backend ``my_conv``), through ``algoswap.register_plugin``: the
selector sees it, ``explain()`` names it, and its results are checked against the op's spec.

A class (the swapping library's form) is constructed as ``cls(layer, algorithm)`` for each layer, with
the selector's answer for it; the instance takes the layer's place in the model and runs as the user
wrote it (an ``nn.Module`` trains as any). It is marked (``SWAPPED_WITH``) so that ``explain`` and
``swap_backend`` say it runs.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from .._api import register_plugin
from .._errors import OpArgumentError, PluginError
from .._global import get_registry
from .._version import API_VERSION

ALGORITHM = "custom"  # the swapping library's name for an implementation of the user's own
PRIORITY = -1000  # below every installed backend: "default" requests elsewhere never prefer it

# (op, id(function)) -> (the function, kept alive so its id stays unique; its backend)
_REGISTERED: dict[tuple[str, int], tuple[Callable[..., Any], str]] = {}


class _Plugin:
    """The in-process plugin declaring one user function's backend and implementation."""

    def __init__(self, op: str, backend: str, function: Callable[..., Any]) -> None:
        self.op, self.backend, self.function = op, backend, function

    def algoswap_api_version(self) -> str:
        return f">={API_VERSION}"

    def algoswap_register(self, registry: Any) -> None:
        where = _qualified(self.function)
        registry.add_backend(self.backend, device="cpu", priority=PRIORITY, description=f"swap_with={where} (host memory)")
        registry.add_implementation(self.op, ALGORITHM, self.backend, self.function, kernel=f"{where} (Python)",
                                    description=f"the function {where}, given as swap_with")


def custom_backend(caller: str, op: str, function: Any) -> str:
    """The backend whose ``custom`` implementation of ``op`` is ``function`` (registered on first use)."""
    if not callable(function):
        raise OpArgumentError(
            caller, "swap_with", function,
            f"a function of numpy arrays implementing {op}: called like an implementation, with the inputs positionally "
            f"and the canonical attributes as keywords ({_signature(op)}), returning the output array; or a class "
            f"constructed as cls(layer, algorithm) whose instances replace the layers")
    key = (op, id(function))
    if key not in _REGISTERED:
        backend = _free_name(_name_of(function))
        record = register_plugin(_Plugin(op, backend, function), name=f"swap_with {backend}")
        if record.status != "loaded":
            raise PluginError(f"{caller}: swap_with={_qualified(function)} could not be registered: {record.error}")
        _REGISTERED[key] = (function, backend)
    return _REGISTERED[key][1]


def _signature(op: str) -> str:
    spec = get_registry().spec(op)
    return f"{op}({', '.join(spec.input_names)}, *, {', '.join(a.name for a in spec.attrs)})"


def _name_of(function: Callable[..., Any]) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", str(getattr(function, "__name__", type(function).__name__)).lower())
    name = re.sub(r"^[^a-z]+", "", name).strip("_")
    return name if name and name != "lambda" else ALGORITHM


def _free_name(name: str) -> str:
    taken = set(get_registry().backends) | {backend for _, backend in _REGISTERED.values()}
    if name not in taken:
        return name
    return next(f"{name}_{n}" for n in range(2, len(taken) + 3) if f"{name}_{n}" not in taken)


def _qualified(function: Callable[..., Any]) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', type(function).__name__)}"


# ---------------------------------------------------------------------------- a class

SWAPPED_WITH = "algoswap_swapped_with"  # marks a layer a swap_with class made (its CustomLayer), for explain and swap_backend


@dataclass(frozen=True)
class CustomLayer:
    """What a swap_with class replaced: the op of the original layer, the algorithm its constructor got,
    the class, and the input shape the layer saw on the sample input (None without one)."""

    op: str
    algorithm: str
    cls: str
    input_shape: tuple[int, ...] | None = None


class CalledInstance(nn.Module):
    """A layer replaced by an instance of a swap_with class that is no ``nn.Module``: calling it calls the
    instance. The original layer stays its child ``orig``, so that its parameters stay the model's."""

    def __init__(self, instance: Any, orig: nn.Module) -> None:
        super().__init__()
        self.instance, self.orig = instance, orig

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.instance(*args, **kwargs)


def constructed(caller: str, cls: type, op: str, name: str, orig: nn.Module, algorithm: str,
                input_shape: tuple[int, ...] | None) -> nn.Module:
    """``cls(orig, algorithm)``: the replacement of the layer ``name`` (running ``op``), marked (``SWAPPED_WITH``)."""
    _check_constructor(caller, cls, name, orig, algorithm)
    try:
        made = cls(orig, algorithm)
    except Exception as exc:  # the user's own constructor: its error as it is, saying for which layer
        note = (f"{caller}: raised by swap_with={cls.__qualname__} constructing layer {name!r} as "
                f"{cls.__name__}({type(orig).__name__}, {algorithm!r})")
        if hasattr(exc, "add_note"):  # Python 3.11 and later
            exc.add_note(note)
        raise
    if not callable(made):
        raise OpArgumentError(caller, "swap_with", f"the class {cls.__name__}", f"a class whose instances are callable "
                              f"(an nn.Module): {cls.__name__}(layer, algorithm) for layer {name!r} is not")
    layer = made if isinstance(made, nn.Module) else CalledInstance(made, orig)
    layer.__dict__[SWAPPED_WITH] = CustomLayer(op, algorithm, _qualified(cls), input_shape)
    return layer


def _check_constructor(caller: str, cls: type, name: str, orig: nn.Module, algorithm: str) -> None:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # a signature Python cannot read (a class implemented in C): its call will tell
    try:
        signature.bind(orig, algorithm)
    except TypeError as exc:
        raise OpArgumentError(caller, "swap_with", f"the class {cls.__name__}({', '.join(map(str, signature.parameters))})",
                              f"a class constructed as {cls.__name__}(layer, algorithm) for each layer, here layer "
                              f"{name!r} ({type(orig).__name__}) and the selector's algorithm {algorithm!r} ({exc})") from None
