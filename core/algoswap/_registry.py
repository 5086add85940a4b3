"""The registry: op specs, backends and implementations, and the scoped view plugins register through."""

from __future__ import annotations

import difflib
import functools
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ._core_caches import SelectionCache
from ._errors import OpArgumentError, RegistrationError
from ._families import Overrides, family_of, find_functions, options_for
from ._log import family_gaps
from ._records import (
    HOST,
    LAYOUTS,
    NAN_BEHAVIOURS,
    BackendRecord,
    ImplRecord,
    MemorySpace,
    PluginRecord,
    Probe,
    RefLike,
    Supports,
    UnsupportedRecord,
    check_name,
)
from ._settings import ENV_ALLOW, ENV_DENY, normalise
from ._spec import OpSpec
from ._specs import FAMILIES, core_specs
from ._validation import check_reference, checked_dtypes

if TYPE_CHECKING:
    from ._supervisor import Supervisor

Key = tuple[str, str, str]


class Registrar:
    """The registry as one plugin sees it during ``algoswap_register``: records are staged here
    and committed together only if the whole registration succeeds and claims no name the plugin
    may not have. It holds no reference to the registry itself (only a read-only view of its ops),
    so a plugin cannot reach other plugins' records through it."""

    def __init__(self, known_ops: Mapping[str, OpSpec], plugin: PluginRecord, supervisor: "Supervisor | None" = None) -> None:
        self.plugin = plugin
        self._known_ops = known_ops
        self._supervisor = supervisor
        self._ops: dict[str, OpSpec] = {}
        self._backends: dict[str, BackendRecord] = {}
        self._impls: dict[Key, ImplRecord] = {}
        self._unsupported: dict[Key, UnsupportedRecord] = {}
        self._families: dict[str, dict[str, str]] = {}  # backend -> the families it registered -> their module

    @property
    def reference(self) -> str | None:
        """The backend this registration declares the reference, if any."""
        return next((name for name, record in self._backends.items() if record.reference), None)

    def add_backend(
        self,
        name: str,
        *,
        device: str = "cpu",
        memory: MemorySpace = HOST,
        probe: Probe | str | None = None,
        priority: int = 0,
        description: str = "",
        reference: bool = False,
    ) -> BackendRecord:
        """Declare a backend this plugin provides, and return its record.

        ``name``: a lower-case identifier, the first part of ``"name:algorithm"`` requests.
        ``device``: the device kind it computes on ("cpu", "cuda", ...), shown in listings.
        ``memory``: an ``algoswap.MemorySpace`` saying where its arrays live (``algoswap.HOST``,
        C-contiguous numpy arrays, by default). ``probe``: a callable, ``"module:attribute"`` string
        or ``algoswap.Ref`` taking no argument and returning True (or ``algoswap.Available(device)``
        naming the device found) or a sentence saying why the backend cannot run here; it is called
        lazily, once per process, time-limited, and an exception it raises is a reason (None: always
        available). Keep it cheap: ``algoswap check-plugin`` flags one slower than 100 ms.
        ``priority``: ranks backends when a request names none, highest first. ``description``:
        shown in listings. ``reference=True``: this backend defines what each op means (every other
        implementation is tested against it, and gradients others lack run on it); at most one
        backend may say so.

        Raises ``RegistrationError`` for a malformed name, a backend declared twice, a ``memory``
        that is not a ``MemorySpace``, a malformed reference, or a second reference backend."""
        check_name("backend", name)
        if name in self._backends:
            raise RegistrationError(f"backend {name!r} declared twice by {self.plugin.owner}")
        if not isinstance(memory, MemorySpace):
            raise RegistrationError(f"backend {name!r}: memory must be an algoswap.MemorySpace, got {memory!r}")
        check_reference(f"backend {name!r}", "probe", probe, optional=True)
        for field in ("to_host", "from_host", "from_dlpack", "capture"):
            check_reference(f"backend {name!r}", f"memory.{field}", getattr(memory, field), optional=field in ("from_dlpack", "capture"))
        if reference and self.reference is not None:
            raise RegistrationError(f"backends {self.reference!r} and {name!r} of {self.plugin.owner} both declare "
                                    "themselves the reference: at most one backend is")
        record = BackendRecord(
            name, device, memory, probe, priority, description,
            plugin=self.plugin.name, distribution=self.plugin.distribution, version=self.plugin.version,
            reference=bool(reference),
        )
        record._health.supervisor = self._supervisor
        self._backends[name] = record
        return record

    def add_implementation(
        self,
        op: str,
        algorithm: str,
        backend: str,
        fn: RefLike,
        *,
        dtypes: Iterable[str] = ("float32", "float64"),
        supports: Supports | str | None = None,
        priority: int = 0,
        kernel: str | Callable[..., str] | None = None,
        description: str = "",
        layout: str = "contiguous",
        nan: str = "exact",
    ) -> ImplRecord:
        """Register ``fn`` as ``algorithm`` of ``op`` on ``backend`` (a backend this plugin declared),
        and return its record.

        ``op``: a core op (``algoswap.registry().ops``) or one this plugin adds with ``add_op``; a
        typo is refused with a suggestion. ``algorithm``: a lower-case identifier other than
        "default" (reserved for the best-ranked choice). ``fn``: a callable, ``"module:attribute"``
        string or ``algoswap.Ref``, imported on first use and called as ``fn(*inputs, **attrs)``:
        the inputs by position in the spec's order (an absent optional input as None), the
        attributes by keyword in their canonical form. It returns an array of the backend's memory
        space with the call's ``out_shape`` and ``out_dtype`` (an in-place op: its first input,
        updated); a call with nothing to compute (``OpCall.empty``) never reaches it.

        ``dtypes``: the dtype names it takes, from ``algoswap.FLOAT_DTYPES``, ``INT_DTYPES`` or
        ``ALL_DTYPES``. ``supports``: a predicate given the validated ``algoswap.OpCall`` and
        returning True or a sentence saying why not (``explain`` shows it); it runs when a call's
        selection is made, not on every call. ``priority``: ranks implementations within one
        backend's priority, highest first. ``kernel``: the kernel name ``explain`` and ``caps`` show:
        a literal string, a function of the call, or a ``Ref`` to one (default
        "backend.op.algorithm"). ``description``: shown in listings.
        ``layout`` ("contiguous", "any" or "channels_last"): the memory orders of host arrays it
        takes as they are (see ``ImplRecord``). ``nan`` ("exact" or "spreads"): how NaN and inf
        inputs come out (see ``ImplRecord``).

        Raises ``RegistrationError`` for an unknown op, a malformed name, a backend this plugin did
        not declare, an implementation registered twice, an unknown dtype (or a bare string, or
        none), a malformed reference, or a ``layout`` or ``nan`` outside the values above."""
        key = self._check_key(op, algorithm, backend)
        if key in self._impls:
            raise RegistrationError(f"implementation {key} registered twice by {self.plugin.owner}")
        where = f"implementation {key}"
        check_reference(where, "fn", fn)
        check_reference(where, "supports", supports, optional=True)
        check_reference(where, "kernel", kernel, optional=True, text_is_name=True)
        checked = checked_dtypes(where, dtypes)
        if layout not in LAYOUTS:
            raise RegistrationError(f"{where}: layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
        if nan not in NAN_BEHAVIOURS:
            raise RegistrationError(f"{where}: nan must be one of {', '.join(NAN_BEHAVIOURS)}; got {nan!r}")
        record = ImplRecord(op, algorithm, backend, fn, checked, supports, priority, kernel, description,
                            self.plugin.name, layout, nan, self.plugin.distribution, self.plugin.version)
        record._state.health = self._backends[backend]._health
        self._impls[key] = record
        return record

    def add_family(
        self, module: ModuleType | str, backend: str, *, overrides: Overrides = None, **defaults: Any
    ) -> tuple[str, ...]:
        """Register the functions of ``module`` (a module, or its dotted name) for the ops of the family
        it is named after (``pkg.activation``: ``algoswap.FAMILIES["activation"]``): each op whose
        function is there (named like the op; ``slice_`` for ``slice``) becomes an implementation on
        ``backend``, with ``add_implementation``'s keywords ``defaults`` (``algorithm`` too: "direct"
        unless given), replaced for one op by what ``overrides`` gives it (a mapping op -> keywords,
        which may name ops of other families too, or a function of the op's name returning them).
        A module given by name is not imported: its functions are found in its compiled code, and
        registered as "module:function" references.

        Returns the family's ops the module has no function for; ``Registry.missing_ops`` reports
        those that the backend neither registers otherwise nor declares unsupported."""
        name, family = family_of(module)
        self._check_backend(backend, f"add_family({name!r})")
        per_op = options_for(overrides)
        ops = FAMILIES[family]
        found = find_functions(module, ops, self._backends[backend]._health.names)
        for op, fn in found.items():
            options = {"algorithm": "direct", **defaults, **per_op(op)}
            self.add_implementation(op, options.pop("algorithm"), backend, fn, **options)
        self._families.setdefault(backend, {})[family] = name
        return tuple(op for op in ops if op not in found)

    def declare_unsupported(self, op: str, algorithm: str, backend: str, reason: str) -> None:
        """Say that ``backend`` knows ``algorithm`` for ``op`` but cannot offer it, and why: the
        capability matrix shows ``reason``, a request for it fails with it, and the conformance kit
        checks that the backend really refuses it. The names are checked as ``add_implementation``
        checks them."""
        key = self._check_key(op, algorithm, backend)
        self._unsupported[key] = UnsupportedRecord(op, algorithm, backend, reason, self.plugin.name)

    def add_op(self, spec: OpSpec) -> None:
        """Declare an op the core does not have, from an ``algoswap.OpSpec`` (its inputs, attributes,
        shape and dtype rules); this plugin's implementations may then name it. A name the core or
        another plugin declares is a clash: the plugin is then ``broken``."""
        check_name("op", spec.name)
        if not isinstance(spec, OpSpec):
            raise RegistrationError(f"add_op: expected an algoswap.OpSpec, got {type(spec).__name__}")
        self._ops[spec.name] = spec

    def spec(self, op: str) -> OpSpec:
        """The spec of ``op``: the core's, another plugin's or one this registration declared (``add_op``);
        an unknown name is an error suggesting close ones."""
        found = self._ops.get(op) or self._known_ops.get(op)
        if found is None:
            raise OpArgumentError(op, "op", op, f"a registered op{_suggest(op, {**self._known_ops, **self._ops})}")
        return found

    def claims(self) -> list[tuple[str, str]]:
        """The names this registration would own: ("op", name) and ("backend", name) pairs, and
        ("role", "reference") if it declares the reference backend."""
        roles = [("role", "reference")] if self.reference is not None else []
        return [("op", name) for name in self._ops] + [("backend", name) for name in self._backends] + roles

    def validate(self) -> None:
        """Refuse staged records that did not come through this registrar's own methods (a plugin
        writing into the staging dictionaries to place records on backends it did not declare)."""
        mine = (self.plugin.name, self.plugin.distribution)
        for name, backend in self._backends.items():
            if not isinstance(backend, BackendRecord) or (backend.name, (backend.plugin, backend.distribution)) != (name, mine):
                raise RegistrationError(f"backend {name!r}: staged by {self.plugin.owner} without add_backend")
        for key, impl in {**self._impls, **self._unsupported}.items():
            if not isinstance(impl, (ImplRecord, UnsupportedRecord)) or impl.key != key or impl.plugin != self.plugin.name \
                    or impl.backend not in self._backends:
                raise RegistrationError(f"{key}: staged by {self.plugin.owner} for a backend it did not declare")

    def _check_key(self, op: str, algorithm: str, backend: str) -> Key:
        check_name("algorithm", algorithm)
        if algorithm == "default":
            raise RegistrationError(f"({op}, {algorithm}, {backend}): 'default' is reserved for the best-ranked choice")
        if op not in self._ops and op not in self._known_ops:
            raise RegistrationError(f"unknown op {op!r}{_suggest(op, self._known_ops)}")
        self._check_backend(backend, f"({op}, {algorithm}, {backend})")
        return (op, algorithm, backend)

    def _check_backend(self, backend: str, where: str) -> None:
        if backend not in self._backends:
            raise RegistrationError(f"{where}: backend {backend!r} was not declared by {self.plugin.owner}")


_READ_ONLY = frozenset({"ops", "backends", "impls", "unsupported"})


class Registry:
    """Everything registered: op specs, backends, implementations, and the plugins they came from.

    ``ops``, ``backends``, ``impls`` and ``unsupported`` are read-only mappings of immutable records,
    and ``plugins`` a tuple: records change only through plugin registration (discovery,
    ``algoswap.register_plugin``), never by writing into the registry.
    """

    def __init__(self) -> None:
        self._ops: dict[str, OpSpec] = {spec.name: spec for spec in core_specs()}
        self._backends: dict[str, BackendRecord] = {}
        self._impls: dict[Key, ImplRecord] = {}
        self._unsupported: dict[Key, UnsupportedRecord] = {}
        self._plugins: list[PluginRecord] = []
        self._claimed: dict[str, tuple[str, ...]] = {}  # backends a plugin that did not load declared
        self.ops: Mapping[str, OpSpec] = MappingProxyType(self._ops)
        self.backends: Mapping[str, BackendRecord] = MappingProxyType(self._backends)
        self.impls: Mapping[Key, ImplRecord] = MappingProxyType(self._impls)
        self.unsupported: Mapping[Key, UnsupportedRecord] = MappingProxyType(self._unsupported)
        self.selection_cache = SelectionCache()  # selections (typed keys) and the front ends' calls: see _core_caches
        self._op_owner: dict[str, PluginRecord] = {}
        self._by_op: dict[str, list[ImplRecord]] = {}
        self._families: dict[str, dict[str, str]] = {}  # backend -> the families it registered -> their module

    def __setattr__(self, name: str, value: Any) -> None:
        # (never ``name in self.__dict__``: touching __dict__ would slow down every attribute read)
        if name in _READ_ONLY and hasattr(self, name):
            raise AttributeError(f"Registry.{name} is read-only: plugins register through algoswap_register")
        object.__setattr__(self, name, value)

    @property
    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every plugin discovery (or ``register_plugin``) found, in load order, with its status."""
        return tuple(self._plugins)

    def spec(self, op: str) -> OpSpec:
        """The spec of ``op``; an unknown name is an error suggesting close ones."""
        try:
            return self._ops[op]
        except KeyError:
            raise OpArgumentError(op, "op", op, f"a registered op{_suggest(op, self._ops)}") from None

    def implementations(self, op: str | None = None, backend: str | None = None) -> list[ImplRecord]:
        """Registered implementations, filtered by op and backend, in registration order."""
        records = self._by_op.get(op, []) if op is not None else list(self._impls.values())
        return [r for r in records if backend is None or r.backend == backend]

    @property
    def reference(self) -> BackendRecord | None:
        """The reference backend (the one that declared ``reference=True``), if one is loaded."""
        return next((record for record in self._backends.values() if record.reference), None)

    def missing_ops(self, backend: str) -> dict[str, tuple[str, ...]]:
        """For each family ``backend`` registered with ``add_family``, the family's ops it neither
        implements nor declares unsupported (families it has whole are left out)."""
        offered = {key[0] for key in (*self._impls, *self._unsupported) if key[2] == backend}
        families = self._families.get(backend, {})
        gaps = {family: tuple(op for op in FAMILIES[family] if op not in offered) for family in families}
        return {family: ops for family, ops in gaps.items() if ops}

    def families(self, backend: str) -> Mapping[str, str]:
        """The families ``backend`` registered with ``add_family`` -> the module each came from."""
        return MappingProxyType(self._families.get(backend, {}))

    def owner_of(self, backend: str) -> str:
        return self._backends[backend].owner

    def owner_of_name(self, kind: str, name: str) -> str | None:
        """Who owns the op or backend ``name`` already ("algoswap (core)" for core ops), or None."""
        if kind == "backend":
            return self._backends[name].owner if name in self._backends else None
        if name in self._op_owner:
            return self._op_owner[name].owner
        return "algoswap (core)" if name in self._ops else None

    def absent_backend(self, name: str) -> str:
        """Why no backend ``name`` is loaded: its plugin is disabled, failed (and why), or is not installed."""
        providers = [p for p in self._plugins if p.status != "loaded" and self._may_provide(p, name)]
        if providers:
            stories = "; ".join(f"its plugin {p.name!r} ({p.owner}) {_status_story(p)}" for p in providers)
            return f"backend {name!r} is not loaded: {stories}"
        loaded = ", ".join(self._backends) or "none"
        unknown = [p.name for p in self._plugins if p.status != "loaded" and not self._claimed.get(p.name)]
        maybe = f"; plugins not loaded, whose backends are unknown: {', '.join(unknown)}" if unknown else ""
        return (f"no backend {name!r} is installed{_suggest(name, self._backends)} (backends loaded: {loaded}{maybe}); "
                f"see `algoswap backends`")

    def _may_provide(self, plugin: PluginRecord, backend: str) -> bool:
        """Whether a plugin that did not load would have provided ``backend``: it declared it, or is
        named like it (backend ``dnnl``: entry point ``dnnl`` or distribution ``algoswap-dnnl``)."""
        names = {normalise(plugin.name), normalise(plugin.distribution)}
        return backend in self._claimed.get(plugin.name, ()) or bool(names & {normalise(backend), f"algoswap-{normalise(backend)}"})

    def _record(self, plugin: PluginRecord, declared: tuple[str, ...] = ()) -> None:
        self._plugins.append(plugin)
        if plugin.status != "loaded":
            self._claimed[plugin.name] = declared

    def _commit(self, staged: Registrar) -> None:
        """Add a plugin's staged records (its claims already settled by ``_ownership``)."""
        self._ops.update(staged._ops)
        self._op_owner.update({name: staged.plugin for name in staged._ops})
        self._backends.update(staged._backends)
        self._impls.update(staged._impls)
        self._unsupported.update(staged._unsupported)
        for record in staged._impls.values():
            self._by_op.setdefault(record.op, []).append(record)
        self._families.update(staged._families)
        self.selection_cache.clear()
        for backend in staged._backends:
            family_gaps(backend, staged.plugin.owner, functools.partial(self.missing_ops, backend))


def _status_story(plugin: PluginRecord) -> str:
    if plugin.status == "disabled":
        return f"is disabled ({plugin.error}: {_how_to_enable(plugin)})"
    return f"{'' if plugin.status in ('timed out', 'crashed') else 'is '}{plugin.status}: {plugin.error}"


def _how_to_enable(plugin: PluginRecord) -> str:
    if plugin.error.startswith("not listed"):
        return f"add {plugin.name} to {ENV_ALLOW} to enable it"
    return f"remove it from {ENV_DENY} to enable it"


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


suggest = _suggest
