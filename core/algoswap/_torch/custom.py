"""``swap_with=``: a user's function as the implementation of swapped layers, registered like any other.

The function becomes the implementation ``<name>:custom`` of the op, on a backend of its own named
after the function (``my_conv`` -> backend ``my_conv``), through ``algoswap.register_plugin``: the
selector sees it, ``explain()`` names it, and its results are checked against the op's spec.
"""

from __future__ import annotations

import re
from typing import Any, Callable

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
    if isinstance(function, type) or not callable(function):
        raise OpArgumentError(
            caller, "swap_with", function if not isinstance(function, type) else f"the class {function.__name__}",
            f"a function of numpy arrays implementing {op}: called like an implementation, with the inputs positionally "
            f"and the canonical attributes as keywords ({_signature(op)}), returning the output array (the swapping "
            "library's module class built from (layer, algorithm) ran unchecked; write its forward as such a function)")
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
