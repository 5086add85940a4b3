"""The process-wide registry, discovered on first use (never on ``import algoswap``)."""

from __future__ import annotations

import threading
import time

from ._errors import PluginError
from ._guard import on_helper_thread
from ._registry import Registry

_lock = threading.RLock()
_registry: Registry | None = None
_discovering = False
discovery_seconds: float = 0.0


def get_registry() -> Registry:
    """The registry with every installed plugin loaded; discovery runs on the first call."""
    global _registry, discovery_seconds, _discovering
    if _registry is None:
        if _discovering and on_helper_thread():  # it would wait for the discovery that waits for it
            raise PluginError("a plugin may not use algoswap's registry while plugins are being imported and registered")
        with _lock:
            if _registry is None:
                from ._plugins import PluginLoader

                started = time.perf_counter()
                fresh = Registry()
                _discovering = True
                try:
                    PluginLoader(fresh).discover()
                finally:
                    _discovering = False
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
