"""Call any registered op on numpy arrays through the registry.

    >>> import numpy as np, algoswap
    >>> x = np.random.rand(1, 3, 8, 8).astype(np.float32)
    >>> w = np.random.rand(4, 3, 3, 3).astype(np.float32)
    >>> y = algoswap.ops.conv2d(x, w, None, stride=2, padding=1, algorithm="numpy:smm")
    >>> y.shape
    (1, 4, 4, 4)

Every op of the registry is available as ``algoswap.ops.<name>``; ``algoswap.ops.call(name, ...)``
does the same with the op named by a string. ``algorithm`` is ``"default"``, an algorithm name
or ``"backend:algorithm"``; ``transfer=True`` lets a device backend serve host arrays (moved to
its memory and back). Selection is cached, so repeated calls with the same shapes cost little.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._global import get_registry
from ._select import select
from ._trace import record

__all__ = ["call"]

_CACHE_LIMIT = 8192


def _prepare(op: str, arrays: tuple[Any, ...], algorithm: str, transfer: bool, attrs: dict[str, Any]) -> tuple[Any, ...]:
    registry = get_registry()
    memory = None if transfer or algorithm == "auto" else "host"
    shapes = [None if a is None else a.shape for a in arrays]
    dtypes = [None if a is None else str(a.dtype) for a in arrays]
    selection = select(registry, op, shapes, dtypes, attrs, algorithm, memory)
    space = selection.backend.memory
    moves = None if space.is_host else space
    return (selection.impl.callable, dict(selection.call.attrs), moves, selection)


def call(op: str, *arrays: Any, algorithm: str = "default", transfer: bool = False, **attrs: Any) -> Any:
    """Run ``op`` on numpy arrays (``None`` for an absent optional input) through the registry."""
    arrays = tuple(a if a is None or type(a) is np.ndarray else np.asarray(a) for a in arrays)
    cache = get_registry().selection_cache
    key: Any = ("ops", op, algorithm, transfer, tuple(None if a is None else (a.shape, a.dtype) for a in arrays), tuple(attrs.items()))
    try:
        entry = cache.get(key)
    except TypeError:  # an unhashable attribute value (a list): validate on every call
        key, entry = None, None
    if entry is None:
        entry = _prepare(op, arrays, algorithm, transfer, attrs)
        if key is not None:
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            cache[key] = entry
    fn, canonical, moves, selection = entry
    record(selection)
    if moves is None:
        arrays = tuple(a if a is None or a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays)
        return fn(*arrays, **canonical)
    result = fn(*(None if a is None else moves.upload(a) for a in arrays), **canonical)
    return moves.download(result)


def _op_function(op: str) -> Callable[..., Any]:
    def run(*arrays: Any, algorithm: str = "default", transfer: bool = False, **attrs: Any) -> Any:
        return call(op, *arrays, algorithm=algorithm, transfer=transfer, **attrs)

    spec = get_registry().spec(op)
    run.__name__ = run.__qualname__ = op
    run.__doc__ = spec.describe()
    return run


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    registry = get_registry()
    if name not in registry.ops:
        raise AttributeError(f"module 'algoswap.ops' has no op {name!r}; registered ops: {', '.join(sorted(registry.ops))}")
    function = globals()[name] = _op_function(name)  # later lookups skip __getattr__
    return function


def __dir__() -> list[str]:
    return sorted(set(get_registry().ops) | set(__all__))
