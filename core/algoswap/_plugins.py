"""Plugin discovery: entry points of the group ``algoswap.backends``, each loaded on its own."""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

from ._errors import PluginError
from ._records import PluginRecord, exception_trace, format_exception
from ._registry import Registrar, Registry
from ._version import API_VERSION

GROUP = "algoswap.backends"
ENV_ALLOW = "ALGOSWAP_PLUGINS"
ENV_DENY = "ALGOSWAP_DISABLE_PLUGINS"
ENV_STRICT = "ALGOSWAP_STRICT_PLUGINS"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _env_names(env: Mapping[str, str], variable: str) -> set[str] | None:
    value = env.get(variable, "").strip()
    if not value:
        return None
    return {_normalise(part.strip()) for part in value.split(",") if part.strip()}


def _disabled_reason(record: PluginRecord, env: Mapping[str, str]) -> str:
    names = {_normalise(record.name), _normalise(record.distribution)}
    allow, deny = _env_names(env, ENV_ALLOW), _env_names(env, ENV_DENY)
    if allow is not None and not names & allow:
        return f"not listed in {ENV_ALLOW}"
    if deny is not None and names & deny:
        return f"listed in {ENV_DENY}"
    return ""


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def api_version_matches(specifier: str, version: str = API_VERSION) -> bool:
    """Whether ``version`` satisfies a specifier such as ``">=1,<2"`` or ``"==1.*"``."""
    have = _version_tuple(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = re.fullmatch(r"(>=|<=|==|!=|>|<|~=)\s*([0-9]+(?:\.[0-9]+)*)(\.\*)?", clause)
        if not match:
            raise ValueError(f"cannot parse version clause {clause!r}")
        op, text, wildcard = match.groups()
        want = _version_tuple(text)
        if wildcard or op == "~=":
            size = len(want) if wildcard else len(want) - 1
            equal = have[:size] == want[:size] and (wildcard or have >= want)
            ok = equal if op in ("==", "~=") else not equal
        else:
            width = max(len(have), len(want))
            a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
            ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


def _plugin_manager() -> Any:
    import pluggy

    from . import hookspecs

    class Manager(pluggy.PluginManager):
        def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
            opts = super().parse_hookimpl_opts(plugin, name)
            if opts is None and name.startswith("algoswap_") and callable(getattr(plugin, name, None)):
                return {}
            return opts

    manager = Manager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


class PluginLoader:
    """Loads plugins into a registry one at a time, recording each outcome in ``registry.plugins``."""

    def __init__(self, registry: Registry, env: Mapping[str, str] | None = None) -> None:
        self.registry = registry
        self.env = os.environ if env is None else env
        self.manager = _plugin_manager()

    @property
    def strict(self) -> bool:
        return self.env.get(ENV_STRICT, "") not in ("", "0", "false", "no")

    def discover(self) -> None:
        """Load every entry point of the group, each isolated from the others."""
        for entry_point in _entry_points():
            dist = getattr(entry_point, "dist", None)
            record = PluginRecord(
                entry_point.name,
                distribution=dist.metadata["Name"] if dist is not None else "",
                version=dist.version if dist is not None else "",
            )
            self._load_entry_point(entry_point, record)

    def _load_entry_point(self, entry_point: Any, record: PluginRecord) -> None:
        reason = _disabled_reason(record, self.env)
        if reason:
            self._finish(record, "disabled", reason)
            return
        try:
            plugin = entry_point.load()
        except (Exception, SystemExit) as exc:
            self._finish(record, "broken", f"import failed: {format_exception(exc)}", exc)
            return
        self.load(plugin, record)

    def load(self, plugin: Any, record: PluginRecord) -> PluginRecord:
        """Register one plugin object (a module or any object with hook functions)."""
        status, error, exc = self._register(plugin, record)
        if status != "loaded" and self.manager.is_registered(plugin):
            self.manager.unregister(plugin)
        return self._finish(record, status, error, exc)

    def _register(self, plugin: Any, record: PluginRecord) -> tuple[str, str, BaseException | None]:
        try:
            self.manager.register(plugin, name=f"{record.name}#{len(self.registry.plugins)}")
        except Exception as exc:
            return "broken", f"invalid hooks: {format_exception(exc)}", exc
        try:
            problem = self._api_problem(plugin, record)
            if problem:
                return "incompatible", problem, None
            staged = Registrar(self.registry, record)
            self._call(plugin, "algoswap_register", registry=staged)
            self.registry.commit(staged)
        except (Exception, SystemExit) as exc:
            return "broken", format_exception(exc), exc
        return "loaded", "", None

    def _api_problem(self, plugin: Any, record: PluginRecord) -> str:
        specifier = self._call(plugin, "algoswap_api_version")
        if specifier is None:
            return "does not declare the core API versions it supports (hook algoswap_api_version)"
        record.api_range = str(specifier)
        if not api_version_matches(record.api_range):
            return f"supports core API {record.api_range}; this core is API {API_VERSION}"
        return ""

    def _call(self, plugin: Any, hook_name: str, **kwargs: Any) -> Any:
        for impl in getattr(self.manager.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                return impl.function(**{name: kwargs[name] for name in impl.argnames})
        return None

    def _finish(self, record: PluginRecord, status: str, error: str = "", exc: BaseException | None = None) -> PluginRecord:
        record.status = status
        record.error = error
        record.trace = exception_trace(exc) if exc is not None else ""
        if record not in self.registry.plugins:
            self.registry.plugins.append(record)
        if status in ("broken", "incompatible") and self.strict:
            raise PluginError(f"plugin {record.name!r} ({record.owner}) is {status}: {error}") from exc
        return record


def _entry_points() -> Iterable[Any]:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
