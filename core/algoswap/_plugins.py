"""Plugin discovery: entry points of the group ``algoswap.backends``, each loaded on its own.

New or changed plugins are first checked in a child process (``_quarantine``): one that ends or
hangs it is skipped, and so is a backend whose probe does. Then discovery runs in two phases. Each plugin is imported and registered on
its own, under supervision (time-limited, named for faulthandler, marked in the fault log while it
runs; see ``_supervisor``), into a staging area. Then the names all of them declare are settled together
(``_ownership``), so that who owns a name never depends on the order entry points load in, and the
registrations that may stand are committed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ._errors import PluginError
from ._faults import Fault, FaultLog
from ._guard import Guard, TimedOut
from ._log import plugin_failed, warn_once
from ._ownership import refused_claims
from ._quarantine import Quarantine, Verdict
from ._records import PluginRecord, exception_trace, format_exception
from ._registry import Registrar, Registry
from ._settings import (
    ENV_ALLOW, ENV_DENY, ENV_RETRY, ENV_STRICT, cache_directory, env_names, normalise, state_directory, timeout_from,
)
from ._supervisor import Supervisor
from ._version import API_VERSION

GROUP = "algoswap.backends"
FAILED = ("broken", "incompatible", "timed out", "crashed")
__all__ = ["ENV_ALLOW", "ENV_DENY", "ENV_STRICT", "GROUP", "PluginLoader", "api_version_matches"]


def _disabled_reason(record: PluginRecord, env: Mapping[str, str]) -> str:
    names = {normalise(record.name), normalise(record.distribution)}
    allow, deny = env_names(env, ENV_ALLOW), env_names(env, ENV_DENY)
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


@dataclass
class _Outcome:
    """How one plugin's import and registration went, before the claims of all are settled."""

    record: PluginRecord
    status: str = "loaded"
    error: str = ""
    exc: BaseException | None = None
    plugin: Any = None
    staged: Registrar | None = None
    trace: str = ""


class PluginLoader:
    """Loads plugins into a registry, recording each outcome in ``registry.plugins``."""

    def __init__(self, registry: Registry, env: Mapping[str, str] | None = None, faults: FaultLog | None = None) -> None:
        self.registry = registry
        self.env = os.environ if env is None else env
        self.manager = _plugin_manager()
        self.guard = Guard(timeout_from(self.env))
        self.faults = FaultLog(state_directory(self.env)) if faults is None else faults
        self.retry = env_names(self.env, ENV_RETRY) or set()

    @property
    def strict(self) -> bool:
        return self.env.get(ENV_STRICT, "") not in ("", "0", "false", "no")

    def discover(self) -> None:
        """Load every entry point of the group, each isolated from the others."""
        self.faults.collect()
        found = [(entry_point, _record_of(entry_point)) for entry_point in _entry_points()]
        _warn_unknown_names(self.env, [record for _, record in found])
        enabled = [(entry_point, record) for entry_point, record in found if not _disabled_reason(record, self.env)]
        quarantine = Quarantine(cache_directory(os.environ), self.guard.timeout, self.retry)  # the machine's record
        verdicts = {id(entry_point): v for (entry_point, _), v in zip(enabled, quarantine.verdicts(enabled))}
        self._settle([self._from_entry_point(entry_point, record, verdicts.get(id(entry_point)))
                      for entry_point, record in found])

    def load(self, plugin: Any, record: PluginRecord) -> PluginRecord:
        """Register one plugin object (a module or any object with hook functions) now."""
        return self._settle([self._stage(plugin, record, self._supervisor(record))])[0]

    def _supervisor(self, record: PluginRecord, checked: Iterable[Fault] = ()) -> Supervisor:
        return Supervisor(record.name, record.distribution, record.version, self.guard, self.faults, self.retry, checked)

    def _from_entry_point(self, entry_point: Any, record: PluginRecord, verdict: Verdict | None) -> _Outcome:
        reason = _disabled_reason(record, self.env)
        if reason:
            return _Outcome(record, "disabled", reason)
        if verdict is None:
            return self.imported(record, entry_point.load)
        if verdict.fault is not None:  # it ended or hung the process that checked it
            return _Outcome(record, verdict.fault.outcome, verdict.fault.story(), trace=verdict.output)
        outcome = self.imported(record, entry_point.load, verdict.probes)  # those backends are out
        outcome.trace = outcome.trace or verdict.output
        return outcome

    def imported(self, record: PluginRecord, load: Callable[[], Any], checked: Iterable[Fault] = ()) -> _Outcome:
        """Import the plugin (``load()``) and register it into a staging area, unless a fault is remembered;
        ``checked``: the faults of the probes that failed its check."""
        supervisor = self._supervisor(record, checked)
        fault = supervisor.previous_fault()
        if fault is not None:
            return _Outcome(record, fault.outcome, fault.story())
        try:
            plugin = supervisor.run("import", load)
        except TimedOut as exc:
            return _Outcome(record, "timed out", exc.story)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit and the like too: one plugin never ends the process
            return _Outcome(record, "broken", f"import failed: {format_exception(exc)}", exc)
        return self._stage(plugin, record, supervisor)

    def _stage(self, plugin: Any, record: PluginRecord, supervisor: Supervisor) -> _Outcome:
        """Register ``plugin`` into a staging area of its own, under supervision."""
        try:
            outcome: _Outcome = supervisor.run("registration", self._register, plugin, record, supervisor)
        except TimedOut as exc:  # what the abandoned registration does from now on is ignored
            return _Outcome(record, "timed out", exc.story, plugin=plugin)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            return _Outcome(record, "broken", format_exception(exc), exc, plugin=plugin)
        return outcome

    def _register(self, plugin: Any, record: PluginRecord, supervisor: Supervisor) -> _Outcome:
        try:
            self.manager.register(plugin, name=f"{record.name}#{id(supervisor)}")
        except Exception as exc:
            return _Outcome(record, "broken", f"invalid hooks: {format_exception(exc)}", exc, plugin=plugin)
        specifier = self._call(plugin, "algoswap_api_version")
        if specifier is None:
            problem = "does not declare the core API versions it supports (hook algoswap_api_version)"
            return _Outcome(record, "incompatible", problem, plugin=plugin)
        record = dataclasses.replace(record, api_range=str(specifier))
        if not api_version_matches(record.api_range):
            problem = f"supports core API {record.api_range}; this core is API {API_VERSION}"
            return _Outcome(record, "incompatible", problem, plugin=plugin)
        staged = Registrar(self.registry.ops, record, supervisor)
        self._call(plugin, "algoswap_register", registry=staged)
        staged.validate()
        return _Outcome(record, plugin=plugin, staged=staged)

    def _call(self, plugin: Any, hook_name: str, **kwargs: Any) -> Any:
        for impl in getattr(self.manager.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                return impl.function(**{name: kwargs[name] for name in impl.argnames})
        return None

    def _settle(self, outcomes: list[_Outcome]) -> list[PluginRecord]:
        """Refuse every registration that claims a name it may not have, commit the others."""
        staged = [o for o in outcomes if o.staged is not None]
        registrars = [o.staged for o in outcomes if o.staged is not None]
        for outcome, reason in zip(staged, refused_claims(self.registry, registrars)):
            if reason:
                outcome.status, outcome.error = "broken", reason
        return [self._finish(outcome) for outcome in outcomes]

    def _finish(self, outcome: _Outcome) -> PluginRecord:
        declared = tuple(outcome.staged._backends) if outcome.staged is not None else ()
        if outcome.status == "loaded" and outcome.staged is not None:
            self.registry._commit(outcome.staged)
        elif outcome.plugin is not None and self.manager.is_registered(outcome.plugin):
            self.manager.unregister(outcome.plugin)
        record = dataclasses.replace(
            outcome.record, status=outcome.status, error=outcome.error, backends=declared if outcome.status == "loaded" else (),
            trace=exception_trace(outcome.exc) if outcome.exc is not None else outcome.trace)
        self.registry._record(record, declared)
        if record.status in FAILED and self.strict:
            raise PluginError(f"plugin {record.name!r} ({record.owner}) is {record.status}: {record.error}") from outcome.exc
        if record.status in FAILED:  # in strict mode not "skipped" but the error above
            plugin_failed(record.name, record.owner, record.status, record.error)
        return record


def _record_of(entry_point: Any) -> PluginRecord:
    dist = getattr(entry_point, "dist", None)
    return PluginRecord(entry_point.name, distribution=dist.metadata["Name"] if dist is not None else "",
                        version=dist.version if dist is not None else "")


def _warn_unknown_names(env: Mapping[str, str], installed: list[PluginRecord]) -> None:
    """A name in ALGOSWAP_PLUGINS or ALGOSWAP_DISABLE_PLUGINS that no installed plugin has (a typo) is
    a warning naming it and the installed plugins: otherwise it silently disables every plugin, or none."""
    known = {normalise(n) for record in installed for n in (record.name, record.distribution) if n}
    listing = ", ".join(f"{r.name} ({r.distribution})" if r.distribution else r.name for r in installed) or "none"
    for variable in (ENV_ALLOW, ENV_DENY):
        unknown = sorted((env_names(env, variable) or set()) - known)
        if unknown:
            warn_once(("unknown plugin names", variable, *unknown), "%s names no installed plugin: %s; installed plugins: %s",
                      variable, ", ".join(unknown), listing)


def _entry_points() -> list[Any]:
    """The group's entry points by name; the same distribution found twice on sys.path counts once."""
    from importlib.metadata import entry_points

    unique: dict[tuple[str, str], Any] = {}
    for entry_point in entry_points(group=GROUP):
        dist = getattr(entry_point, "dist", None)
        unique.setdefault((normalise(dist.metadata["Name"]) if dist is not None else "", entry_point.name), entry_point)
    return sorted(unique.values(), key=lambda ep: ep.name)
