"""Every hook an algoswap plugin can implement. Each hook's docstring is its contract.

A plugin is any importable object (usually a module) named by an entry point in the group
``algoswap.backends``. Its hooks are plain functions named like the specs below, optionally
marked with ``@algoswap.hookimpl``. A hook may accept a subset of the arguments of its spec,
so specs can gain arguments without breaking existing plugins. Hooks are called with keywords,
once per plugin, each plugin on its own: a failure in one never affects another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ._registry import Registrar

PROJECT = "algoswap"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def algoswap_api_version() -> str:  # type: ignore[empty-body]
    """Return the range of core API versions this plugin supports, as a specifier string.

    Called first, before registration. Examples: ``">=1,<2"``, ``"==1.*"``. A plugin whose
    range does not include the running core's ``algoswap.API_VERSION`` is reported as
    ``incompatible`` and never registered. Required: a plugin without it is incompatible.

    Since API 1.0.
    """


@hookspec
def algoswap_register(registry: "Registrar") -> None:
    """Declare this plugin's backends, implementations and (optionally) new op specs.

    ``registry`` is a view of the registry scoped to this plugin:

    - ``registry.add_backend(name, device=..., memory=..., probe=..., priority=...)``
    - ``registry.add_implementation(op, algorithm, backend, fn, dtypes=..., supports=...,
      priority=..., kernel=...)`` where ``fn`` and ``supports`` may be callables or
      ``"module:attribute"`` strings imported on first use;
    - ``registry.declare_unsupported(op, algorithm, backend, reason)`` for an algorithm the
      backend knows but cannot offer (the capability matrix shows the reason);
    - ``registry.add_op(spec)`` for an op the core does not declare.

    Nothing is registered unless the hook returns normally and none of its keys clashes with
    another plugin's; otherwise the plugin is reported as ``broken`` and skipped whole.
    The return value is ignored.

    Since API 1.0.
    """
