"""Selection: which implementation serves a call, and why every other candidate did not."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ._errors import NoImplementationError, OpArgumentError
from ._log import selected
from ._records import BackendRecord, ImplRecord
from ._registry import Registry, suggest
from ._spec import OpCall, Shape


@dataclass(frozen=True)
class Selection:
    """The outcome of selection: the chosen implementation, the call it serves, and the rejects."""

    impl: ImplRecord
    backend: BackendRecord
    call: OpCall
    request: str
    rejected: tuple[tuple[str, str], ...] = ()

    @property
    def kernel(self) -> str:
        return self.impl.kernel_name(self.call)

    def describe(self) -> str:
        """A few lines for people: what runs, and why the other candidates were passed over."""
        lines = [f"{self.call.op} {self.call.shapes} {self.call.dtype}: {self.impl.qualified} (kernel {self.kernel})"]
        lines += [f"  rejected {name}: {reason}" for name, reason in self.rejected]
        return "\n".join(lines)


def parse_request(op: str, request: Any) -> tuple[str | None, str | None]:
    """'default' or 'auto' -> (None, None); 'smm' -> (None, 'smm'); 'numpy:smm' -> ('numpy', 'smm');
    'numpy:default' -> ('numpy', None).

    A bare 'auto' ranks like 'default' (callers that can move data let it consider every memory
    space); qualified, 'dnnl:auto' names the algorithm called "auto" (oneDNN's own choice).
    """
    expected = "'default', 'auto', an algorithm name, or 'backend:algorithm'"
    if not isinstance(request, str) or not request or request.count(":") > 1:
        raise OpArgumentError(op, "algorithm", request, expected)
    backend, _, algorithm = request.rpartition(":")
    if (":" in request and not backend) or not algorithm:
        raise OpArgumentError(op, "algorithm", request, expected)
    if algorithm == "default" or request == "auto":
        return (backend or None, None)
    return (backend or None, algorithm)


def _rank(registry: Registry, impl: ImplRecord) -> tuple[int, int, str, str]:
    backend = registry.backends[impl.backend]
    return (-backend.priority, -impl.priority, impl.backend, impl.algorithm)


def serves_memory(backend: BackendRecord, memory: str | None) -> bool:
    """Whether ``backend`` serves inputs in ``memory`` (None: any) without being asked to move them."""
    return memory is None or backend.memory.name == memory or (memory == "host" and backend.memory.accepts_host)


def _reject_reason(registry: Registry, impl: ImplRecord, call: OpCall, memory: str | None) -> str | None:
    """Why ``impl`` cannot serve ``call`` (None if it can). Every cached selection keeps its rejections: the reasons
    that do not depend on the call are one string each, shared (interned), not one per selection."""
    backend = registry.backends[impl.backend]
    available = backend.availability()
    if available is not True:
        return sys.intern(f"backend unavailable: {available}")
    if not serves_memory(backend, memory):
        return sys.intern(f"works on {backend.memory.name} memory; the inputs are in {memory} memory "
                          "(pass transfer=True to move them)")
    answer = impl.check(call)
    return None if answer is True else str(answer)


def check_known(registry: Registry, op: str, request: str) -> None:
    """Refuse a request that names no implementation of ``op`` (with close-name suggestions)."""
    backend, algorithm = parse_request(op, request)
    candidates = registry.implementations(op)
    if not any((backend is None or i.backend == backend) and (algorithm is None or i.algorithm == algorithm) for i in candidates):
        raise _unknown_request(registry, op, request, backend, algorithm, candidates)


def choose(registry: Registry, call: OpCall, request: str = "default", memory: str | None = "host") -> Selection:
    """Pick the best-ranked implementation that matches ``request`` and supports ``call``."""
    backend, algorithm = parse_request(call.op, request)
    candidates = registry.implementations(call.op)
    matching = [
        impl for impl in candidates
        if (backend is None or impl.backend == backend) and (algorithm is None or impl.algorithm == algorithm)
    ]
    if not matching:
        raise _unknown_request(registry, call.op, request, backend, algorithm, candidates)
    rejected: list[tuple[str, str]] = []
    for impl in sorted(matching, key=lambda impl: _rank(registry, impl)):
        reason = _reject_reason(registry, impl, call, memory)
        if reason is None:
            chosen = Selection(impl, registry.backends[impl.backend], call, request, tuple(rejected))
            selected(chosen)
            return chosen
        rejected.append((sys.intern(impl.qualified), reason))
    lines = "\n".join(f"  {name}: {reason}" for name, reason in rejected)
    raise NoImplementationError(
        f"{call.op}: no implementation matching {request!r} supports input shapes {call.shapes} "
        f"with dtype {call.dtype}. Candidates:\n{lines}",
        tuple(rejected),
    )


def _unknown_request(
    registry: Registry, op: str, request: str, backend: str | None, algorithm: str | None, candidates: list[ImplRecord]
) -> NoImplementationError:
    if backend is not None and backend not in registry.backends:
        return NoImplementationError(f"{op}: {request!r}: {registry.absent_backend(backend)}")
    if not candidates:
        loaded = ", ".join(registry.backends) or "none"
        return NoImplementationError(f"{op}: no implementation is registered (backends loaded: {loaded}); see `algoswap backends`")
    declared = [
        u for u in registry.unsupported.values()
        if u.op == op and (backend is None or u.backend == backend) and (algorithm is None or u.algorithm == algorithm)
    ]
    if declared:
        lines = "\n".join(f"  {u.backend}:{u.algorithm}: {u.reason}" for u in declared)
        return NoImplementationError(f"{op}: {request!r} is declared unsupported:\n{lines}", tuple((f"{u.backend}:{u.algorithm}", u.reason) for u in declared))
    names = sorted({impl.qualified for impl in candidates} | {impl.algorithm for impl in candidates} | {f"{impl.backend}:default" for impl in candidates})
    hint = suggest(request, names) or suggest(algorithm or "", [impl.algorithm for impl in candidates])
    offered = ", ".join(sorted({impl.qualified for impl in candidates}))
    return NoImplementationError(f"{op}: no implementation named {request!r}{hint} Offered: {offered}")


_NESTED = frozenset({tuple, list, dict})


def typed_key(value: Any) -> Any:
    """``value`` as a hashable cache key that tells apart what validation tells apart: 1, 1.0 and True
    compare (and hash) equal, but a converter may accept one and refuse another, so every value is
    keyed with its type (items of lists and tuples too: those two are alike to every converter;
    dicts by sorted items)."""
    kind = type(value)
    if kind is tuple or kind is list:
        return (tuple, *[typed_key(v) for v in value])
    if kind is dict:
        return (dict, *sorted((k, typed_key(v)) for k, v in value.items()))
    return (kind, value)


def attrs_key(attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    """A typed key of keyword attributes (cheap for flat scalars, the usual case)."""
    if not attrs:
        return ()
    kinds = tuple(map(type, attrs.values()))
    if _NESTED.isdisjoint(kinds):
        return (*attrs.items(), kinds)
    return (tuple(attrs), typed_key(tuple(attrs.values())))


def call_key(
    op: str, request: str, memory: str | None, shapes: Sequence[Shape | None], dtypes: Sequence[str | None],
    attrs: Mapping[str, Any],
) -> tuple[Any, ...]:
    """The selection cache's key of a call: everything that changes its validation and choice, each
    value with its type (sizes too: bind refuses a size of 2.0 that equals 2); unhashable where an
    attribute value is (an array)."""
    sizes = tuple(None if s is None else (tuple(s), tuple(map(type, s))) for s in shapes)
    return (op, request, memory, sizes, tuple(dtypes), attrs_key(attrs))


def select(
    registry: Registry,
    op: str,
    shapes: Sequence[Shape | None],
    dtypes: Sequence[str | None],
    attrs: Mapping[str, Any] | None = None,
    algorithm: str = "default",
    memory: str | None = "host",
) -> Selection:
    """Validate a call and choose its implementation: the one place that maps a call to a selection,
    cached in the registry's selection cache under ``call_key``."""
    attrs = dict(attrs or {})
    key = call_key(op, algorithm, memory, shapes, dtypes, attrs)
    try:
        cached: Selection | None = registry.selection_cache.get(key)
    except TypeError:  # an unhashable attribute value (an array): validated and chosen on every call
        return choose(registry, registry.spec(op).bind(shapes, dtypes, attrs), algorithm, memory)
    if cached is None:
        call = registry.spec(op).bind(shapes, dtypes, attrs)
        cached = registry.selection_cache.put(key, choose(registry, call, algorithm, memory))
    return cached
