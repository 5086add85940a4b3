"""The registry-level public functions: ``registry``, ``plugins``, ``select``, ``capabilities``."""

from __future__ import annotations

from typing import Any, Sequence

from ._capabilities import CapabilityMatrix, build
from ._errors import NoImplementationError
from ._global import get_registry
from ._records import PluginRecord
from ._registry import Registry, suggest
from ._select import Selection
from ._select import select as _select
from ._spec import Shape


def registry() -> Registry:
    """The process-wide registry, with installed plugins discovered on first call."""
    return get_registry()


def plugins() -> list[PluginRecord]:
    """Every plugin discovery found, with its status: loaded, broken, incompatible or disabled."""
    return list(get_registry().plugins)


def select(
    op: str,
    shapes: Sequence[Shape | None],
    dtype: str = "float32",
    algorithm: str = "default",
    *,
    memory: str | None = "host",
    **attrs: Any,
) -> Selection:
    """Which implementation would serve ``op`` on inputs of these shapes, and why the others would not.

    ``dtype`` applies to every present input; ``memory=None`` considers backends of any memory space.
    """
    dtypes = [None if s is None else dtype for s in shapes]
    return _select(get_registry(), op, shapes, dtypes, attrs, algorithm, memory)


def capabilities(op: str | None = None, backend: str | None = None, *, available: bool = False) -> CapabilityMatrix:
    """The capability matrix of every registered op (or one), over every loaded backend (or one)."""
    registry = get_registry()
    if op is not None:
        registry.spec(op)
    if backend is not None and backend not in registry.backends:
        loaded = ", ".join(registry.backends) or "none"
        raise NoImplementationError(f"capabilities: no backend named {backend!r}{suggest(backend, registry.backends)} (loaded: {loaded})")
    return build(registry, op, backend, available)


def register_plugin(plugin: Any, name: str | None = None) -> PluginRecord:
    """Load a plugin object (a module or any object with hook functions) into the registry now,
    exactly as discovery would load an installed one: for trying a plugin before packaging it.
    Returns its record; check ``record.status`` ("loaded", "broken", "incompatible")."""
    from ._plugins import PluginLoader

    label = str(name or getattr(plugin, "__name__", type(plugin).__name__))
    return PluginLoader(get_registry()).load(plugin, PluginRecord(label))
