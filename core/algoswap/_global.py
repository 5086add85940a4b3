"""The process-wide registry, discovered on first use (never on ``import algoswap``)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from ._errors import PluginError
from ._guard import on_helper_thread
from ._registry import Registry

_lock = threading.RLock()
_registry: Registry | None = None
_discoverer: int | None = None  # the thread that imports and registers plugins now
discovery_seconds: float = 0.0


@contextlib.contextmanager
def discovering() -> Iterator[None]:
    """Plugin code runs inside: it may not use the registry (its discovery would wait for, or start,
    the discovery that runs the plugin)."""
    global _discoverer
    _discoverer = threading.get_ident()
    try:
        yield
    finally:
        _discoverer = None


def get_registry() -> Registry:
    """The registry with every installed plugin loaded; discovery runs on the first call."""
    global _registry, discovery_seconds
    if _registry is None:
        if _discoverer is not None and (on_helper_thread() or _discoverer == threading.get_ident()):
            raise PluginError("a plugin may not use algoswap's registry while plugins are being imported and registered")
        with _lock:
            if _registry is None:
                from ._plugins import PluginLoader

                started = time.perf_counter()
                fresh = Registry()
                with discovering():
                    PluginLoader(fresh).discover()
                discovery_seconds = time.perf_counter() - started
                _registry = fresh
    return _registry


def reload_plugins() -> Registry:
    """Forget every plugin and discover again (after installing or removing one, changing
    ``ALGOSWAP_PLUGINS`` / ``ALGOSWAP_DISABLE_PLUGINS``, or retrying one: ``retry_plugins``)."""
    global _registry
    with _lock:
        _registry = None
        return get_registry()
