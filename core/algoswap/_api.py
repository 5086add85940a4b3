"""The registry-level public functions: ``registry``, ``plugins``, ``select``, ``capabilities``."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ._capabilities import CapabilityMatrix, build
from ._errors import NoImplementationError
from ._global import get_registry
from ._records import PluginRecord
from ._registry import Registry
from ._select import Selection
from ._select import select as _select
from ._spec import Shape


def registry() -> Registry:
    """The process-wide registry, with installed plugins discovered on first call."""
    return get_registry()


def plugins() -> list[PluginRecord]:
    """Every plugin discovery found, with its status: loaded, broken, incompatible, disabled,
    timed out or crashed."""
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
        raise NoImplementationError(f"capabilities: {registry.absent_backend(backend)}")
    return build(registry, op, backend, available)


def register_plugin(plugin: Any, name: str | None = None) -> PluginRecord:
    """Load a plugin object (a module or any object with hook functions) into the registry now,
    exactly as discovery would load an installed one: for trying a plugin before packaging it.
    Returns its record; check ``record.status`` ("loaded", "broken", "incompatible")."""
    from ._plugins import PluginLoader

    label = str(name or getattr(plugin, "__name__", type(plugin).__name__))
    return PluginLoader(get_registry()).load(plugin, PluginRecord(label))


def retry_plugins(*names: str) -> list[str]:
    """Forget that these plugins (entry-point, distribution or backend names; none: every one)
    crashed or timed out in an earlier process, or in the check before loading them, so that the next
    discovery checks and imports them again; returns what was forgotten. Then ``reload_plugins()``,
    or start a new process."""
    from ._faults import FaultLog
    from ._quarantine import CheckRecord
    from ._settings import cache_directory, normalise, state_directory

    wanted = {normalise(n) for n in names} or {"all"}
    faults = FaultLog(state_directory(os.environ))
    faults.collect()  # a process that has just crashed left only its marker
    forgotten = [fault.key for fault in faults.clear(wanted)] + CheckRecord(cache_directory(os.environ)).forget(wanted)
    return list(dict.fromkeys(forgotten))
