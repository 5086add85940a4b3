"""The records plugins hand to the registry: memory spaces, backends, implementations."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from ._errors import PluginError, RegistrationError
from ._guard import Frame, TimedOut
from ._names import ModuleNames
from ._ref import Ref, resolve_ref
from ._spec import OpCall
from ._settings import ENV_TIMEOUT
from ._supervisor import BackendHealth, owner_label, reason_of, unresolvable

RefLike = Union[Callable[..., Any], str]  # a callable (a Ref too) or "module:attribute"
Probe = Callable[[], Union[bool, str]]
Supports = Callable[[OpCall], Union[bool, str]]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(kind: str, name: str) -> str:
    """Names are lower-case identifiers, so "backend:algorithm" requests parse unambiguously."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(f"{kind} name {name!r} must be a lower-case identifier ([a-z][a-z0-9_]*)")
    return name


def _identity(array: Any) -> Any:
    return array


def _host_array(array: Any) -> Any:
    import numpy

    if type(array).__module__.startswith("scipy.sparse"):  # a CSR input stays as it is
        return array
    return numpy.asarray(array, order="C")  # unlike ascontiguousarray, keeps 0-D arrays 0-D


@dataclass(frozen=True)
class MemorySpace:
    """Where a backend's arrays live, their type, and how they move to and from host numpy arrays.

    ``array_type`` is the "module.Type" of the arrays implementations take and return (they have
    ``.shape`` and ``.dtype``). ``to_host`` (an array of this space -> a host numpy array) and
    ``from_host`` (the reverse) may be references (``RefLike``); they default to host memory's own:
    the identity (``_identity``) and a C-contiguous numpy array (``_host_array``). A backend whose
    functions do not resolve is unavailable.

    ``name`` is "host" for host memory; a memory space whose arrays live on a torch device is
    named after that device type ("cuda", "xpu", "mps"), so torch tensors find their backends.
    ``from_dlpack`` makes a backend array from any DLPack-capable object (a torch tensor) without
    copying; results go back to torch through their own ``__dlpack__``, or, for arrays that wrap a torch
    tensor (``as_torch()``, the mps space's: torch's DLPack has no Metal device), as that tensor. ``accepts_host``: host
    inputs are served without being asked for transfers (the caller uploads them), as for a device
    the host reaches cheaply (SYCL USM on a CPU device); a GPU's memory leaves it False.
    ``capture`` (optional): records a program's device work once and replays it (a CUDA graph):
    ``capture(run, inputs)`` returns a replay, a function of new inputs of the same shapes and
    dtypes giving the outputs as ``run(inputs)`` would, or raises why it cannot
    (``algoswap.graph._capture`` says how executors use it).
    """

    name: str
    array_type: str
    to_host: RefLike = _identity
    from_host: RefLike = _host_array
    description: str = ""
    from_dlpack: RefLike | None = None
    accepts_host: bool = False
    capture: RefLike | None = None

    @property
    def is_host(self) -> bool:
        """Whether this is host memory (``name == "host"``): numpy arrays, no transfers."""
        return self.name == "host"

    def upload(self, array: Any) -> Any:
        """A host array in this memory space (the identity, contiguity aside, for host memory)."""
        return resolve_ref(self.from_host)(array)

    def download(self, array: Any) -> Any:
        """An array of this memory space as a host numpy array."""
        return resolve_ref(self.to_host)(array)


HOST = MemorySpace("host", "numpy.ndarray", description="C-contiguous numpy arrays in host memory")


@dataclass(frozen=True)
class Available:
    """An availability probe's answer that the backend can run here, naming the device it found
    (listings show it: ``algoswap backends``, the capability matrix). A plain True says the same."""

    device: str


@dataclass(frozen=True)
class BackendRecord:
    """A backend: a name, the device kind it computes on, its memory space and availability probe.

    ``reference``: this backend defines what each op means (at most one backend is the reference):
    every other implementation is tested against it, and gradients another backend lacks run on it.

    Records are immutable; what the process learns about the backend (its probe's answer, a
    predicate that timed out) is kept apart, in its health. ``Registrar.add_backend`` makes them
    and fills in ``plugin``, ``distribution`` and ``version`` from the plugin that declared it.
    """

    name: str
    device: str = "cpu"
    memory: MemorySpace = HOST
    probe: RefLike | None = None
    priority: int = 0
    description: str = ""
    plugin: str = ""
    distribution: str = ""
    version: str = ""
    reference: bool = False
    _health: BackendHealth = field(default_factory=BackendHealth, init=False, repr=False, compare=False)

    @property
    def owner(self) -> str:
        """The distribution and version that declared this backend."""
        return owner_label(self.plugin, self.distribution, self.version)

    def availability(self) -> bool | str:
        """True, or why this backend cannot run here. The probe runs once, time-limited; any exception
        it raises, a reference that cannot be imported or a time-out is a reason, never a crash."""
        answer = self._health.answer
        return answer if answer is not None else self._health.settle(self)

    @property
    def status(self) -> str:
        """"available", "unavailable", "timed out" (its probe or a predicate took too long) or "crashed"
        (its probe ended an earlier process)."""
        self.availability()
        return self._health.status

    @property
    def device_in_use(self) -> str:
        """The device its probe found (``Available(device)``), else the device kind it declared."""
        self.availability()
        return self._health.device or self.device


LAYOUTS = ("contiguous", "any", "channels_last")
NAN_BEHAVIOURS = ("exact", "spreads")


class _ImplState:
    """What the process learns about an implementation: its resolved callable, or why it cannot have it."""

    __slots__ = ("fn", "problem", "health", "frame", "found")

    def __init__(self) -> None:
        self.fn: Callable[..., Any] | None = None
        self.problem: str | None = None
        self.health: BackendHealth | None = None
        self.frame: Frame | None = None
        self.found = False  # the modules of its references were found


@dataclass(frozen=True)
class ImplRecord:
    """One implementation, keyed by (op, algorithm, backend).

    ``layout`` says which host arrays it takes as they are: "contiguous" (C-contiguous only: others
    are copied before the call), "any" (any strides; the output may keep the input's memory order)
    or "channels_last" (like "any", and 4-D activations are preferred in NHWC memory order: a
    swap_backend model converts them once and keeps them so between such implementations).

    ``nan`` says how non-finite inputs come out: "exact" (the default: NaN and inf exactly where
    torch has them) or "spreads" (an algorithm that mixes many inputs into each intermediate, such
    as FFT or Winograd convolution, may also turn outputs that torch keeps finite into NaN; it never
    loses a NaN or inf that torch has). The capability matrix shows it; conformance checks it.

    ``Registrar.add_implementation`` makes them (its docstring says what each argument means) and
    fills in ``plugin``, ``distribution`` and ``version`` from the plugin that registered it.
    """

    op: str
    algorithm: str
    backend: str
    fn: RefLike
    dtypes: frozenset[str] = frozenset({"float32", "float64"})
    supports: RefLike | None = None
    priority: int = 0
    kernel: str | Callable[[OpCall], str] | None = None
    description: str = ""
    plugin: str = ""
    layout: str = "contiguous"
    nan: str = "exact"
    distribution: str = ""
    version: str = ""
    _state: _ImplState = field(default_factory=_ImplState, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.fn, (str, Ref)) and not isinstance(self.kernel, Ref):  # else resolved when first checked
            self._state.fn = self.fn

    @property
    def key(self) -> tuple[str, str, str]:
        """``(op, algorithm, backend)``: what identifies the implementation in the registry."""
        return (self.op, self.algorithm, self.backend)

    @property
    def qualified(self) -> str:
        """``"backend:algorithm"``, as a request names it."""
        return f"{self.backend}:{self.algorithm}"

    @property
    def owner(self) -> str:
        """The distribution and version that registered this implementation."""
        return owner_label(self.plugin, self.distribution, self.version)

    @property
    def callable(self) -> Callable[..., Any]:
        """The implementation itself, imported on first use; PluginError if it cannot be imported."""
        state = self._state
        fn = state.fn
        if fn is None:
            problem = state.problem or _resolve_fn(self)
            fn = state.fn
            if problem or fn is None:
                raise PluginError(f"{self.op} {self.qualified}: {problem}")
        return fn

    def check(self, call: OpCall) -> bool | str:
        """True if this implementation serves `call`, else a sentence saying why not.

        The ``supports()`` predicate, and the import of a ``"module:attribute"`` implementation, run
        time-limited (``ALGOSWAP_PLUGIN_TIMEOUT``): one that takes too long takes the backend out of
        selection for the rest of the process."""
        if call.dtype not in self.dtypes:
            return f"dtype {call.dtype} not supported (supports {', '.join(sorted(self.dtypes))})"
        state = self._state
        if self.supports is None and state.fn is not None:
            return True
        if state.problem is not None:
            return state.problem
        health = state.health
        supervisor = health.supervisor if health is not None else None
        if health is None or supervisor is None:
            return _check_here(self, call)
        if state.frame is None:
            state.frame = supervisor.frame(f"supports() of {self.op} {self.qualified}")
        try:
            return supervisor.guard.run(state.frame, _check_here, self, call)  # type: ignore[no-any-return]
        except TimedOut as exc:
            reason = (f"timed out: supports() of {self.op} {self.qualified} ({self.owner}) did not answer within "
                      f"{exc.seconds:g} s ({ENV_TIMEOUT}); backend {self.backend!r} is out of selection in this process")
            health.take_out(self.backend, "timed out", reason)
            return reason

    def import_problem(self) -> str | None:
        """Why this implementation cannot be imported, if that is known or one of its references names
        a module or an attribute that does not exist (checked without importing its modules: the
        capability matrix promises only what can run)."""
        state = self._state
        if state.problem is not None or state.found:
            return state.problem
        missing = self.missing_reference()
        state.found = missing is None
        return None if missing is None else missing[1]

    def missing_reference(self) -> tuple[str, str] | None:
        """(field, why) of the first lazy reference whose module does not exist or whose module's code
        does not bind the attribute, read without importing it; None if every one may resolve."""
        names = self._state.health.names if self._state.health is not None else ModuleNames()
        for field, what, target in self._references():
            missing = names.problem(target)
            if missing is not None:
                return field, unresolvable(what, target, self.owner, missing)
        return None

    def _references(self) -> list[tuple[str, str, str]]:
        """(field, what, "module:attribute") of each lazy reference: implementation, predicate, kernel name."""
        refs = [("fn", "implementation", self.fn), ("supports", "supports() predicate", self.supports),
                ("kernel", "kernel() function", self.kernel)]
        return [(field, what, ref if isinstance(ref, str) else ref.target) for field, what, ref in refs
                if isinstance(ref, Ref) or (isinstance(ref, str) and field != "kernel")]  # a str kernel is its name

    def kernel_name(self, call: OpCall) -> str:
        """The kernel this implementation runs, as its backend names it."""
        if callable(self.kernel):
            try:
                return str(self.kernel(call))
            except Exception:
                return "unknown (kernel() raised)"
        return self.kernel or f"{self.backend}.{self.op}.{self.algorithm}"


def _check_here(impl: ImplRecord, call: OpCall) -> bool | str:
    """The predicate's answer, then the implementation's import; failures are reasons."""
    if impl.supports is not None:
        try:
            predicate = _callable_of(impl.supports)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            problem = impl._state.problem = unresolvable("supports() predicate", _target(impl.supports), impl.owner, exc)
            return problem
        try:
            answer = predicate(call)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            return f"supports() raised {reason_of(exc)}"
        if answer is not True:
            return str(answer) or "not supported"
    return _resolve_fn(impl) or True


def _resolve_fn(impl: ImplRecord) -> str | None:
    """Import a lazy implementation (and a lazy kernel-name function); None, or why it cannot be (kept)."""
    state = impl._state
    if state.fn is None and state.problem is None:
        what, ref = "implementation", impl.fn
        try:
            fn = _callable_of(impl.fn)
            if isinstance(impl.kernel, Ref):
                what, ref = "kernel() function", impl.kernel
                impl.kernel.resolve()
            state.fn = fn
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            state.problem = unresolvable(what, _target(ref), impl.owner, exc)
    return state.problem


def _callable_of(ref: RefLike) -> Callable[..., Any]:
    """What a reference stands for, imported now: a ``Ref`` is resolved (and kept where it passes
    arguments of its own), a "module:attribute" string imported, a callable taken as it is."""
    if isinstance(ref, Ref):
        resolved: Callable[..., Any] = ref.resolve()
        return ref if ref.args else resolved
    imported: Callable[..., Any] = resolve_ref(ref)
    return imported


def _target(ref: RefLike) -> str:
    return ref.target if isinstance(ref, Ref) else str(ref)


@dataclass(frozen=True)
class UnsupportedRecord:
    """An (op, algorithm, backend) a backend declares it does not offer, with the reason."""

    op: str
    algorithm: str
    backend: str
    reason: str
    plugin: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.op, self.algorithm, self.backend)


def format_exception(exc: BaseException) -> str:
    """One line for listings; the traceback's last frames for `--verbose` views."""
    return reason_of(exc)


def exception_trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))


@dataclass(frozen=True)
class PluginRecord:
    """What discovery learnt about one plugin: where it came from and how loading went.

    status: "loaded", "broken" (import or registration failed, or it declared a name it may not
    have), "incompatible" (core API version outside the plugin's range), "disabled" (by
    ALGOSWAP_PLUGINS / ALGOSWAP_DISABLE_PLUGINS, before import), "timed out" (its import or
    registration took longer than ALGOSWAP_PLUGIN_TIMEOUT, now or in an earlier process, or in the
    child process that checked it before loading) or "crashed" (an earlier process, or that child,
    ended during its import or registration). Timed-out and crashed plugins are skipped, not
    imported, until retried (``algoswap retry``) or reinstalled.
    """

    name: str
    distribution: str = ""
    version: str = ""
    status: str = "loaded"
    error: str = ""
    trace: str = ""
    api_range: str = ""
    backends: tuple[str, ...] = ()

    @property
    def owner(self) -> str:
        """The distribution and version, as used in clash reports."""
        return owner_label(self.name, self.distribution, self.version)
