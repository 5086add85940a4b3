"""``algoswap.check_plugin(name)``: what would fail in a plugin before any user hits it.

Registration already refuses what it can tell without importing anything (``_validation``). This
goes further: it runs each backend's probe with timing, compares the plugin API range the plugin
declares with the core's, and checks every implementation's references, its signature and its
``supports()`` predicate's names against the op's spec. For a backend that runs here, it imports
the plugin's modules to do so; for one that cannot (no GPU, no CuPy, not a Mac), it reads them from
the modules' code without importing them (``_names``, ``_check_code.CodeReader``), so that what a
backend offers is checked alike on every machine: that it cannot run here is said, and is no problem
(a probe that timed out or crashed is). Plugin code runs under the plugin's supervisor, as it does
in discovery (time-limited; an exception is a problem, never a crash). A reference found not to
resolve, or a signature that does not fit, is kept on the implementation, so this process's
capability matrix shows it as ✗.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ._check_code import CodeReader, names_in, names_read, signature_problem
from ._guard import TimedOut
from ._ref import Ref
from ._records import BackendRecord, ImplRecord, PluginRecord, RefLike, _callable_of, _resolve_fn, _target
from ._registry import Registry, suggest
from ._settings import normalise
from ._supervisor import reason_of, unresolvable
from ._version import API_VERSION

SLOW_PROBE_SECONDS = 0.1  # a probe runs in every process that considers the backend
FAULTY = ("timed out", "crashed")  # a backend status that is a problem (unavailable is not: it says where it runs)


@dataclass(frozen=True)
class Problem:
    """One thing that would fail: what it is about (an implementation "conv2d mine:direct", a backend,
    the plugin), the field, and what is wrong against what was expected."""

    subject: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: {self.message}"


@dataclass(frozen=True)
class BackendCheck:
    """A backend's status, how long its probe took (None: it has none, or it did not run), and how many
    implementations were checked, and how: imported, or (it cannot run here) read from their code."""

    name: str
    status: str
    reason: str | None
    probe_seconds: float | None
    implementations: int = 0
    from_code: bool = False


@dataclass(frozen=True)
class PluginReport:
    """What ``check_plugin`` found: the plugin, its backends, and every problem (none: ``ok``)."""

    name: str
    distribution: str
    version: str
    status: str
    api_range: str
    backends: tuple[BackendCheck, ...]
    implementations: int
    problems: tuple[Problem, ...]
    core_api: str = API_VERSION

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_text(self) -> str:
        """The report as ``algoswap check-plugin`` prints it: the plugin, its backends, one line per problem, a summary."""
        owner = f"{self.distribution} {self.version}".strip() or "not installed"
        api = f"core API range {self.api_range or 'unknown'} (this core: {self.core_api})"
        lines = [f"plugin {self.name} ({owner}): {self.status}; {api}"]
        for b in self.backends:
            lines.append(f"backend {b.name}: {b.status}{_probe_text(b)}{': ' + b.reason if b.reason else ''}")
            lines += [f"  cannot run here: {_implementations(b.implementations)} checked from their code, unimported "
                      "(references; signatures and supports() names where their code shows them)"] if b.from_code else []
        lines.append(f"{_implementations(self.implementations)} checked")
        lines += [f"problem: {problem}" for problem in self.problems]
        count = len(self.problems)
        lines.append(f"{count} problem{'s' if count != 1 else ''} found" if count else "ok: no problem found")
        return "\n".join(lines)


def check_plugin(name: str, *, registry: Registry | None = None) -> PluginReport:
    """Check the plugin ``name`` (its entry-point name, its distribution's, or a backend it declares) in
    ``registry`` (default: the process-wide one); see the module's doc for what is checked."""
    if registry is None:
        from ._global import get_registry

        registry = get_registry()
    plugin = _find(registry, name)
    if plugin is None:
        known = [p.name for p in registry.plugins]
        problem = Problem(f"plugin {name!r}", "name", f"no plugin of that name is loaded (plugins: {', '.join(known) or 'none'})"
                          f"{suggest(name, known)}")
        return PluginReport(name, "", "", "not found", "", (), 0, (problem,))
    problems = [Problem(f"plugin {plugin.name!r}", "status", f"{plugin.status}: {plugin.error}")] if plugin.status != "loaded" else []
    backends, impls, reader = [], [], CodeReader()
    for backend in plugin.backends:
        record, served = registry.backends[backend], registry.implementations(backend=backend)
        check, found = _check_backend(record, len(served))
        backends.append(check)
        problems += found
        if check.from_code:
            problems += [problem for impl in served for problem in _check_from_code(registry, impl, reader)]
        else:
            problems += [problem for impl in served for problem in _check_implementation(registry, impl)]
        impls += served
    unimported = {check.name for check in backends if check.from_code}
    problems += _check_predicates(registry, impls, unimported, reader)
    return PluginReport(plugin.name, plugin.distribution, plugin.version, plugin.status, plugin.api_range,
                        tuple(backends), len(impls), tuple(problems))


def _find(registry: Registry, name: str) -> PluginRecord | None:
    """The plugin (the last one loaded, if several) named ``name``, distributed as it, or declaring backend ``name``."""
    wanted = normalise(name)
    matches = [p for p in registry.plugins if wanted in (normalise(p.name), normalise(p.distribution)) or name in p.backends]
    return matches[-1] if matches else None


def _check_backend(record: BackendRecord, implementations: int) -> tuple[BackendCheck, list[Problem]]:
    """The backend's probe (timed) and, where it cannot run here, its own references read from their code."""
    subject = f"backend {record.name!r}"
    probe_seconds = _timed_probe(record) if record.probe is not None else None
    available = record.availability()
    reason = None if available is True else str(available)
    problems = []
    if record.status in FAULTY:
        problems.append(Problem(subject, "probe", f"{record.status} here ({reason})"))
    if reason is not None:
        problems += [Problem(subject, field, why) for field, why in _backend_references(record)]
    if probe_seconds is not None and probe_seconds > SLOW_PROBE_SECONDS:
        problems.append(Problem(subject, "probe", f"took {probe_seconds * 1e3:.0f} ms (expected under "
                                f"{SLOW_PROBE_SECONDS * 1e3:.0f} ms: every process that considers the backend runs it; "
                                "import heavy libraries at the first call instead)"))
    return BackendCheck(record.name, record.status, reason, probe_seconds, implementations, reason is not None), problems


def _backend_references(record: BackendRecord) -> list[tuple[str, str]]:
    """(field, why) for the probe's and the memory space's references of a backend that cannot run here
    whose module does not exist or whose code does not bind them (read without importing them)."""
    health, found = record._health, []
    if isinstance(record.probe, (str, Ref)):
        target = _target(record.probe)
        missing = health.names.problem(target)
        found += [("probe", unresolvable("availability probe", target, record.owner, missing))] if missing else []
    memory = health.unresolvable_memory(record)
    return found + ([("memory", memory)] if memory else [])


def _timed_probe(record: BackendRecord) -> float | None:
    """Seconds the probe takes: its first run, or (its answer known already) a run of its own, supervised."""
    health = record._health
    started = time.perf_counter()
    if health.answer is None:
        record.availability()
    elif health.supervisor is not None:
        from ._supervisor import _ask

        try:
            health.supervisor.run("probe", _ask, record, backend=record.name)
        except TimedOut:
            pass  # the status already says so
    else:
        return None
    return time.perf_counter() - started


def _check_implementation(registry: Registry, impl: ImplRecord) -> list[Problem]:
    subject = f"{impl.op} {impl.qualified}"
    resolved = _resolved(impl)
    if isinstance(resolved, Problem):
        return [resolved]
    problem = signature_problem(resolved, registry.spec(impl.op))
    if problem is None:
        return []
    impl._state.problem = problem  # every call would raise TypeError: out of selection, ✗ in the matrix
    return [Problem(subject, "fn", problem)]


def _check_from_code(registry: Registry, impl: ImplRecord, reader: CodeReader) -> list[Problem]:
    """An implementation of a backend that cannot run here, checked from its code, nothing imported:
    each reference's module and attribute, then the signature its code declares (where it shows one).
    A problem found is kept on the implementation, as ``_check_implementation`` keeps it."""
    subject, state = f"{impl.op} {impl.qualified}", impl._state
    missing = impl.missing_reference()
    if missing is not None:
        field, state.problem = missing
        return [Problem(subject, field, state.problem)]
    problem = reader.signature_problem(impl.fn, registry.spec(impl.op))
    if problem is None:
        return []
    state.problem = problem
    return [Problem(subject, "fn", problem)]


def _resolved(impl: ImplRecord) -> Callable[..., Any] | Problem:
    """The implementation's callable (its predicate and kernel-name function imported too), or the
    problem of the first that does not resolve (kept on the implementation: caps shows it as ✗)."""
    subject, state = f"{impl.op} {impl.qualified}", impl._state
    for field, ref in (("supports", impl.supports), ("fn", impl.fn)):
        if ref is None:
            continue
        what = "supports() predicate" if field == "supports" else "implementation"
        value = _guarded(impl, field, _callable_of, ref)
        if isinstance(value, BaseException):
            state.problem = unresolvable(what, _target(ref), impl.owner, value)
            return Problem(subject, field, state.problem)
        if not callable(value):
            state.problem = f"its {what} {_target(ref)!r} ({impl.owner}) is a {type(value).__name__}, not a callable"
            return Problem(subject, field, state.problem)
    problem = _guarded(impl, "kernel", _resolve_fn, impl)
    if problem:
        field = "kernel" if "kernel() function" in str(problem) else "fn"
        return Problem(subject, field, str(problem))
    return impl.callable


def _guarded(impl: ImplRecord, field: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under the plugin's supervision; an exception (a time-out too) is returned, not raised."""
    health = impl._state.health
    supervisor = health.supervisor if health is not None else None
    try:
        if supervisor is None:
            return fn(*args)
        return supervisor.guard.run(supervisor.frame(f"{field} of {impl.op} {impl.qualified}"), fn, *args)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return exc if not isinstance(exc, TimedOut) else TimeoutError(reason_of(exc))


def _check_predicates(registry: Registry, impls: list[ImplRecord], unimported: set[str], reader: CodeReader) -> list[Problem]:
    """Names each ``supports()`` predicate that resolves reads that none of the ops it serves has (read
    from its module's code, unimported, for the backends in ``unimported``)."""
    served: dict[Any, list[ImplRecord]] = {}
    for impl in impls:
        if impl.supports is not None:
            served.setdefault(impl.supports, []).append(impl)
    problems = []
    for predicate, users in served.items():
        found = _names_of(users[0], predicate, reader if users[0].backend in unimported else None)
        if found is None:
            continue  # reported with the implementation
        specs = [registry.spec(op) for op in dict.fromkeys(impl.op for impl in users)]
        attrs, inputs = found
        subject = f"supports() {_label(predicate)} of backend {users[0].backend!r}"
        for kind, names, known in (("attribute", attrs, {a.name for s in specs for a in s.attrs}),
                                   ("input", inputs, {n for s in specs for n in s.input_names})):
            for unknown in sorted(names - known):
                ops = ", ".join(s.name for s in specs)
                problems.append(Problem(subject, "supports", f"reads {kind} {unknown!r}, which no op it serves has "
                                        f"({ops}: {', '.join(sorted(known)) or 'none'})"))
    return problems


def _names_of(impl: ImplRecord, predicate: RefLike, reader: CodeReader | None) -> tuple[set[str], set[str]] | None:
    """``names_read`` of ``impl``'s predicate: resolved, or, given a reader, read from its module's code
    (nothing where the code does not show it); None if it does not resolve."""
    if reader is not None and isinstance(predicate, (str, Ref)):
        node = reader.definition(_target(predicate))
        return (set(), set()) if node is None else names_in(node)
    resolved = _guarded(impl, "supports", _callable_of, predicate)
    return None if isinstance(resolved, BaseException) or not callable(resolved) else names_read(resolved)


def _label(predicate: Any) -> str:
    return _target(predicate) if isinstance(predicate, (str, Ref)) else str(getattr(predicate, "__qualname__", predicate))


def _implementations(count: int) -> str:
    return f"{count} implementation{'s' if count != 1 else ''}"


def _probe_text(check: BackendCheck) -> str:
    return "" if check.probe_seconds is None else f" (probe {check.probe_seconds * 1e3:.1f} ms)"
