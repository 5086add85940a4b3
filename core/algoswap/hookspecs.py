"""Every hook an algoswap plugin can implement. Each hook's docstring is its contract.

A plugin is any importable object (usually a module) named by an entry point in the group
``algoswap.backends``. Its hooks are plain functions named like the specs below, optionally
marked with ``@algoswap.hookimpl``. A hook may accept a subset of the arguments of its spec,
so specs can gain arguments without breaking existing plugins. Hooks are called with keywords,
once per plugin, each plugin on its own: a failure in one never affects another.

A plugin's code (its import, these hooks, its availability probes and ``supports()`` predicates)
runs on a helper thread within ``ALGOSWAP_PLUGIN_TIMEOUT`` seconds (default 20; 0: no limit, on
the calling thread), so do main-thread-only work (``signal.signal``) lazily, in implementations.
Any exception it raises, ``SystemExit`` and other ``BaseException`` subclasses included
(KeyboardInterrupt aside), is reported, never raised. A new, upgraded or reinstalled plugin is
first imported and registered (``algoswap_api_version``, ``algoswap_register``), and each of its
backends probed, once in a child process: a plugin that ends that process (a crash, ``os._exit``)
or does not finish in time there is skipped without ever being imported in a command's own process,
and a backend whose probe does so is out of selection (the plugin's other backends are used); the
probes run again, for their answer, in each command. A probe that does not finish in time or ends
a command's own process is remembered in the user's state directory. Either way the plugin (or
backend) is skipped until another version is installed or the user retries it (``algoswap retry``).
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

    ``registry`` is a view of the registry scoped to this plugin: it stages this plugin's records
    and holds no way to reach, or change, those of other plugins (committed records are immutable):

    - ``registry.add_backend(name, device=..., memory=..., probe=..., priority=..., reference=False)``;
      ``probe()`` returns True (or ``algoswap.Available(device)`` naming the device found) or a
      reason string; ``reference=True`` declares the backend that defines what each op means;
    - ``registry.add_family(module, backend, overrides=..., **defaults)``: every op of the family
      the module is named after (``pkg.activation``: ``algoswap.FAMILIES["activation"]``) whose
      function is in it, by name, as an implementation; a module given by its dotted name is not
      imported. Returns the family's ops it has no function for;
    - ``registry.add_implementation(op, algorithm, backend, fn, dtypes=..., supports=...,
      priority=..., kernel=...)`` where ``fn``, ``supports`` and ``kernel`` may be callables or
      ``algoswap.Ref("module:attribute")`` (``fn`` and ``supports`` also plain strings) imported on
      first use; ``dtypes`` from ``algoswap.FLOAT_DTYPES``, ``INT_DTYPES``, ``ALL_DTYPES`` (any other
      name, or a malformed "module:attribute" string, is a RegistrationError: see ``_validation``;
      ``algoswap check-plugin`` checks references, signatures and predicates, from the modules' code where the
      backend cannot run);
    - ``registry.declare_unsupported(op, algorithm, backend, reason)`` for an algorithm the
      backend knows but cannot offer (the capability matrix shows the reason);
    - ``registry.add_op(spec)`` for an op the core does not declare.

    Nothing is registered unless the hook returns normally and every name it declares may be its
    own; otherwise the plugin is reported as ``broken`` and skipped whole. Names are settled after
    every plugin has registered, so the outcome never depends on load order: a backend or op name
    that several plugins declare goes to none of them (each report names the others), names the
    core or an already loaded plugin owns are refused, and so is the reference role once a backend
    holds it (several claiming it at once: none gets it), and the reference backend's name to any
    other plugin. The return value is ignored.

    Since API 1.0; ``add_family``, ``add_backend(reference=)``: API 1.1.
    """
