"""The records plugins hand to the registry: memory spaces, backends, implementations."""

from __future__ import annotations

import importlib
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from ._errors import RegistrationError
from ._spec import OpCall

Ref = Union[Callable[..., Any], str]
Probe = Callable[[], Union[bool, str]]
Supports = Callable[[OpCall], Union[bool, str]]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(kind: str, name: str) -> str:
    """Names are lower-case identifiers, so "backend:algorithm" requests parse unambiguously."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(f"{kind} name {name!r} must be a lower-case identifier ([a-z][a-z0-9_]*)")
    return name


def resolve_ref(ref: Any) -> Any:
    """A callable, or 'module:attribute' imported on first use (keeps heavy imports lazy)."""
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


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

    ``name`` is "host" for host memory; a memory space whose arrays live on a torch device is
    named after that device type ("cuda", "xpu", "mps"), so torch tensors find their backends.
    ``from_dlpack`` makes a backend array from any DLPack-capable object (a torch tensor) without
    copying; results go back to torch through their own ``__dlpack__``. ``accepts_host``: host
    inputs are served without being asked for transfers (the caller uploads them), as for a device
    the host reaches cheaply (SYCL USM on a CPU device); a GPU's memory leaves it False.
    """

    name: str
    array_type: str
    to_host: Ref = _identity
    from_host: Ref = _host_array
    description: str = ""
    from_dlpack: Ref | None = None
    accepts_host: bool = False

    @property
    def is_host(self) -> bool:
        return self.name == "host"

    def upload(self, array: Any) -> Any:
        """A host array in this memory space (the identity, contiguity aside, for host memory)."""
        return resolve_ref(self.from_host)(array)

    def download(self, array: Any) -> Any:
        """An array of this memory space as a host numpy array."""
        return resolve_ref(self.to_host)(array)


HOST = MemorySpace("host", "numpy.ndarray", description="C-contiguous numpy arrays in host memory")


def _reason_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class BackendRecord:
    """A backend: a name, the device kind it computes on, its memory space and availability probe."""

    name: str
    device: str = "cpu"
    memory: MemorySpace = HOST
    probe: Ref | None = None
    priority: int = 0
    description: str = ""
    plugin: str = ""
    distribution: str = ""
    version: str = ""
    _availability: bool | str | None = field(default=None, repr=False)

    def availability(self) -> bool | str:
        """True, or why this backend cannot run here. Cached; a raising probe is a reason, not a crash."""
        if self._availability is None:
            self._availability = self._run_probe()
        return self._availability

    def _run_probe(self) -> bool | str:
        if self.probe is None:
            return True
        try:
            answer = resolve_ref(self.probe)()
        except Exception as exc:  # a missing driver is a reason, never a traceback
            return f"availability probe raised {_reason_of(exc)}"
        if answer is True:
            return True
        return str(answer) if answer else "availability probe answered False"


LAYOUTS = ("contiguous", "any", "channels_last")
NAN_BEHAVIOURS = ("exact", "spreads")


@dataclass
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
    """

    op: str
    algorithm: str
    backend: str
    fn: Ref
    dtypes: frozenset[str] = frozenset({"float32", "float64"})
    supports: Ref | None = None
    priority: int = 0
    kernel: str | Callable[[OpCall], str] | None = None
    description: str = ""
    plugin: str = ""
    layout: str = "contiguous"
    nan: str = "exact"
    _callable: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.op, self.algorithm, self.backend)

    @property
    def qualified(self) -> str:
        return f"{self.backend}:{self.algorithm}"

    @property
    def callable(self) -> Callable[..., Any]:
        """The implementation itself, imported on first use."""
        if self._callable is None:
            self._callable = resolve_ref(self.fn)
        return self._callable

    def check(self, call: OpCall) -> bool | str:
        """True if this implementation serves `call`, else a sentence saying why not."""
        if call.dtype not in self.dtypes:
            return f"dtype {call.dtype} not supported (supports {', '.join(sorted(self.dtypes))})"
        if self.supports is None:
            return True
        try:
            answer = resolve_ref(self.supports)(call)
        except Exception as exc:
            return f"supports() raised {_reason_of(exc)}"
        return True if answer is True else (str(answer) or "not supported")

    def kernel_name(self, call: OpCall) -> str:
        """The kernel this implementation runs, as its backend names it."""
        if callable(self.kernel):
            try:
                return str(self.kernel(call))
            except Exception:
                return "unknown (kernel() raised)"
        return self.kernel or f"{self.backend}.{self.op}.{self.algorithm}"


@dataclass(frozen=True)
class UnsupportedRecord:
    """An (op, algorithm, backend) a backend declares it does not offer, with the reason."""

    op: str
    algorithm: str
    backend: str
    reason: str
    plugin: str = ""


def format_exception(exc: BaseException) -> str:
    """One line for listings; the traceback's last frames for `--verbose` views."""
    return _reason_of(exc)


def exception_trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))


@dataclass
class PluginRecord:
    """What discovery learnt about one plugin: where it came from and how loading went.

    status: "loaded", "broken" (import, registration or a clash failed), "incompatible"
    (core API version outside the plugin's range), or "disabled" (by ALGOSWAP_PLUGINS /
    ALGOSWAP_DISABLE_PLUGINS, before import).
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
        if self.distribution:
            return f"{self.distribution} {self.version}".strip()
        return f"plugin {self.name!r}"
