"""The registry: op specs, backends and implementations, and the scoped view plugins register through."""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from ._core_caches import SelectionCache
from ._errors import OpArgumentError, RegistrationError
from ._records import (
    HOST,
    LAYOUTS,
    NAN_BEHAVIOURS,
    BackendRecord,
    ImplRecord,
    MemorySpace,
    PluginRecord,
    Probe,
    Ref,
    Supports,
    UnsupportedRecord,
    check_name,
)
from ._spec import OpSpec
from ._specs import core_specs

Key = tuple[str, str, str]


class Registrar:
    """The registry as one plugin sees it during ``algoswap_register``: records are staged here
    and committed together only if the whole registration succeeds."""

    def __init__(self, registry: "Registry", plugin: PluginRecord) -> None:
        self._registry = registry
        self.plugin = plugin
        self.ops: dict[str, OpSpec] = {}
        self.backends: dict[str, BackendRecord] = {}
        self.impls: dict[Key, ImplRecord] = {}
        self.unsupported: dict[Key, UnsupportedRecord] = {}

    def add_backend(
        self,
        name: str,
        *,
        device: str = "cpu",
        memory: MemorySpace = HOST,
        probe: Probe | str | None = None,
        priority: int = 0,
        description: str = "",
    ) -> BackendRecord:
        """Declare a backend. ``probe()`` returns True or a reason string; it is called lazily, once."""
        check_name("backend", name)
        if name in self.backends:
            raise RegistrationError(f"backend {name!r} declared twice by {self.plugin.owner}")
        if not isinstance(memory, MemorySpace):
            raise RegistrationError(f"backend {name!r}: memory must be an algoswap.MemorySpace, got {memory!r}")
        record = BackendRecord(
            name, device, memory, probe, priority, description,
            plugin=self.plugin.name, distribution=self.plugin.distribution, version=self.plugin.version,
        )
        self.backends[name] = record
        return record

    def add_implementation(
        self,
        op: str,
        algorithm: str,
        backend: str,
        fn: Ref,
        *,
        dtypes: Iterable[str] = ("float32", "float64"),
        supports: Supports | str | None = None,
        priority: int = 0,
        kernel: str | Callable[..., str] | None = None,
        description: str = "",
        layout: str = "contiguous",
        nan: str = "exact",
    ) -> ImplRecord:
        """Register ``fn`` as ``algorithm`` of ``op`` on ``backend`` (a backend this plugin declared).

        ``layout`` ("contiguous", "any" or "channels_last"): the memory orders of host arrays it
        takes as they are (see ``ImplRecord``). ``nan`` ("exact" or "spreads"): how NaN and inf
        inputs come out (see ``ImplRecord``)."""
        key = self._check_key(op, algorithm, backend)
        if key in self.impls:
            raise RegistrationError(f"implementation {key} registered twice by {self.plugin.owner}")
        if not (callable(fn) or isinstance(fn, str)):
            raise RegistrationError(f"implementation {key}: fn must be a callable or 'module:attribute'")
        if layout not in LAYOUTS:
            raise RegistrationError(f"implementation {key}: layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
        if nan not in NAN_BEHAVIOURS:
            raise RegistrationError(f"implementation {key}: nan must be one of {', '.join(NAN_BEHAVIOURS)}; got {nan!r}")
        record = ImplRecord(op, algorithm, backend, fn, frozenset(dtypes), supports, priority, kernel, description,
                            self.plugin.name, layout, nan)
        self.impls[key] = record
        return record

    def declare_unsupported(self, op: str, algorithm: str, backend: str, reason: str) -> None:
        """Say that ``backend`` cannot offer ``algorithm`` for ``op``, and why (shown in the matrix)."""
        key = self._check_key(op, algorithm, backend)
        self.unsupported[key] = UnsupportedRecord(op, algorithm, backend, reason, self.plugin.name)

    def add_op(self, spec: OpSpec) -> None:
        """Declare an op the core does not have (a name already declared elsewhere is a clash)."""
        check_name("op", spec.name)
        self.ops[spec.name] = spec

    def _check_key(self, op: str, algorithm: str, backend: str) -> Key:
        check_name("algorithm", algorithm)
        if algorithm == "default":
            raise RegistrationError(f"({op}, {algorithm}, {backend}): 'default' is reserved for the best-ranked choice")
        if op not in self.ops and op not in self._registry.ops:
            raise RegistrationError(f"unknown op {op!r}{_suggest(op, self._registry.ops)}")
        if backend not in self.backends:
            raise RegistrationError(f"({op}, {algorithm}, {backend}): backend {backend!r} was not declared by {self.plugin.owner}")
        return (op, algorithm, backend)


class Registry:
    """Everything registered: op specs, backends, implementations, and the plugins they came from."""

    def __init__(self) -> None:
        self.ops: dict[str, OpSpec] = {spec.name: spec for spec in core_specs()}
        self.backends: dict[str, BackendRecord] = {}
        self.impls: dict[Key, ImplRecord] = {}
        self.unsupported: dict[Key, UnsupportedRecord] = {}
        self.plugins: list[PluginRecord] = []
        self.selection_cache = SelectionCache()  # selections (typed keys) and the front ends' calls: see _core_caches
        self._op_owner: dict[str, PluginRecord] = {}
        self._by_op: dict[str, list[ImplRecord]] = {}

    def spec(self, op: str) -> OpSpec:
        """The spec of ``op``; an unknown name is an error suggesting close ones."""
        try:
            return self.ops[op]
        except KeyError:
            raise OpArgumentError(op, "op", op, f"a registered op{_suggest(op, self.ops)}") from None

    def implementations(self, op: str | None = None, backend: str | None = None) -> list[ImplRecord]:
        """Registered implementations, filtered by op and backend, in registration order."""
        records = self._by_op.get(op, []) if op is not None else list(self.impls.values())
        return [r for r in records if backend is None or r.backend == backend]

    def commit(self, staged: Registrar) -> None:
        """Add a plugin's staged records, or raise RegistrationError naming both owners of a clash."""
        self._check_clashes(staged)
        self.ops.update(staged.ops)
        self._op_owner.update({name: staged.plugin for name in staged.ops})
        self.backends.update(staged.backends)
        self.impls.update(staged.impls)
        self.unsupported.update(staged.unsupported)
        for record in staged.impls.values():
            self._by_op.setdefault(record.op, []).append(record)
        staged.plugin.backends = tuple(staged.backends)
        self.selection_cache.clear()

    def _check_clashes(self, staged: Registrar) -> None:
        mine = staged.plugin.owner
        for name in staged.ops:
            if name in self.ops:
                owner = self._op_owner[name].owner if name in self._op_owner else "algoswap (core)"
                raise RegistrationError(f"op {name!r} is declared by both {owner} and {mine}")
        for name in staged.backends:
            if name in self.backends:
                theirs = self.backends[name]
                raise RegistrationError(f"backend {name!r} is declared by both {theirs.distribution} {theirs.version} and {mine}")

    def owner_of(self, backend: str) -> str:
        record = self.backends[backend]
        return f"{record.distribution} {record.version}".strip()


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


suggest = _suggest
