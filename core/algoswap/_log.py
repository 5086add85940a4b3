"""algoswap's log: ``logging.getLogger("algoswap")``.

- WARNING, once per process and plugin (or backend): a plugin that is broken, incompatible, timed out
  or crashed; a backend whose probe timed out or crashed; a name in ALGOSWAP_PLUGINS or
  ALGOSWAP_DISABLE_PLUGINS that no installed plugin has; a record of plugin checks that cannot be
  read or written, or a child process that could not check plugins.
- DEBUG: the plugins checked in a child process before they are loaded (new or changed ones), each
  selection made (the call, the implementation chosen, each candidate rejected and why),
  each move of an op's inputs between memory spaces, and the ops of the families a backend
  registered (``add_family``) that it has no implementation for.

As for any library, nothing is printed unless the application configures logging (a NullHandler
is attached): ``logging.basicConfig(level=logging.DEBUG)`` shows everything. The ``algoswap``
command prints the warnings on stderr.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

LOG = logging.getLogger("algoswap")
LOG.addHandler(logging.NullHandler())
_warned: set[tuple[str, ...]] = set()
_lock = threading.Lock()


def warn_once(key: tuple[str, ...], message: str, *args: Any) -> None:
    """``LOG.warning(message, *args)`` the first time ``key`` is seen in this process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    LOG.warning(message, *args)


def plugin_failed(name: str, owner: str, status: str, error: str) -> None:
    warn_once(("plugin", name, status), "plugin %r (%s) is %s and was skipped: %s", name, owner, status, error)


def backend_out(name: str, status: str, reason: str) -> None:
    warn_once(("backend", name, status), "backend %r is %s and out of selection: %s", name, status, reason)


def plugins_checked(names: list[str], seconds: float, record: Any) -> None:
    LOG.debug("checked %d new or changed plugin(s) in child processes before loading them (%s): %.0f ms; "
              "verdicts kept in %s", len(names), ", ".join(names), seconds * 1000, record)


def selected(selection: Any) -> None:
    if LOG.isEnabledFor(logging.DEBUG):
        call = selection.call
        rejected = "; ".join(f"{name}: {reason}" for name, reason in selection.rejected) or "none"
        LOG.debug("%s %s %s (request %r): chose %s; rejected: %s", call.op, call.shapes, call.dtype, selection.request,
                  selection.impl.qualified, rejected)


def moved(op: str, source: str, target: str, count: int) -> None:
    if LOG.isEnabledFor(logging.DEBUG):
        LOG.debug("%s: %d input(s) moved %s -> %s", op, count, source, target)


def family_gaps(backend: str, owner: str, missing: Callable[[], Mapping[str, tuple[str, ...]]]) -> None:
    if LOG.isEnabledFor(logging.DEBUG):
        for family, ops in missing().items():
            LOG.debug("backend %r (%s) has no %s function for: %s", backend, owner, family, ", ".join(ops))
