"""The process-wide registry, discovered on first use (never on ``import algoswap``)."""

from __future__ import annotations

import threading
import time

from ._registry import Registry

_lock = threading.RLock()
_registry: Registry | None = None
discovery_seconds: float = 0.0


def get_registry() -> Registry:
    """The registry with every installed plugin loaded; discovery runs on the first call."""
    global _registry, discovery_seconds
    if _registry is None:
        with _lock:
            if _registry is None:
                from ._plugins import PluginLoader

                started = time.perf_counter()
                fresh = Registry()
                PluginLoader(fresh).discover()
                discovery_seconds = time.perf_counter() - started
                _registry = fresh
    return _registry


def reload_plugins() -> Registry:
    """Forget every plugin and discover again (after installing or removing one, or changing
    ``ALGOSWAP_PLUGINS`` / ``ALGOSWAP_DISABLE_PLUGINS``)."""
    global _registry
    with _lock:
        _registry = None
        return get_registry()
