"""Requests: from the user's selector to one request string per subject, for every front end.

A *subject* is what a request is chosen for: a layer of ``swap_conv2d``/``swap_operation``, a step
of ``swap_backend``, a node of ``graph.Executor``. Each front end describes its subjects and calls
`assign`; the selector forms, their precedence and their errors live here only.

A selector (the ``algorithm=`` argument; ``algos=`` and ``algorithms=`` are its old names) is

- a string, the request of every subject: ``"default"``, ``"auto"``, an algorithm (``"smm"``) or
  ``"backend:algorithm"``; but a whole-model ``"backend:default"`` is a preference (below); and
  ``"torch"``, "leave it in PyTorch", where the front end has PyTorch to leave it in (the layers of
  ``swap_conv2d``/``swap_operation``/``swap_backend``; ``assign(..., in_torch=True)``);
- a list or tuple: one request per subject, in forward order;
- a dict from op name to a selector for that op's subjects, or from a subject's name (a module
  name such as ``"layer1.0.conv1"``, an fx or graph node name) to a selector for that subject;
- a function of the subject's object (a torch module, a ``FunctionalCall``, a graph ``Node``), or
  of the object and its input shape (batch included);
- ``prefer(r1, r2, ..., otherwise="default")``: per subject, the first request that serves it.

A subject's request comes from, most specific first: its name, its op, the whole-model form, its
own request (a layer swapped before, a node built with ``algorithm=``), the preferences, "default".

Preferences serve the subjects that have no request from the above. ``backends=["dnnl", "numpy"]``
gives each the first listed backend that is available, implements its op and (where the front end
can tell from known shapes) serves the call; none of them is an error naming the subject. A
whole-model ``"dnnl:default"`` means "prefer dnnl": an op dnnl has no implementation of at all gets
"default" instead (logged at DEBUG). A request given for a subject, its op or the whole model that
cannot serve the subject is an error naming the subject.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence, Union

from ._errors import AlgoswapError, SelectorError
from ._log import LOG
from ._registry import suggest
from ._select import check_known
from ._spec import Shape

OLD_NAMES = ("algos", "algorithms")
IN_TORCH = "torch"  # the request that leaves a subject in PyTorch


@dataclass(frozen=True)
class Subject:
    """What one request is chosen for: its op, the names a selector may use for it (``name`` first,
    the one errors show), the object a function selector receives, and its input shape if known."""

    op: str
    name: str
    target: Any
    input_shape: Shape | None = None
    aliases: tuple[Hashable, ...] = ()
    own: str | None = None
    noun: str = "layer"

    @property
    def keys(self) -> tuple[Hashable, ...]:
        return (self.name, *self.aliases)

    def where(self, caller: str) -> str:
        shape = f", input {tuple(self.input_shape)}" if self.input_shape is not None else ""
        return f"{caller}: {self.noun} {self.name!r} ({self.op}{shape})"


@dataclass(frozen=True)
class Preference:
    """``prefer(...)``: for each subject, the first of ``requests`` that serves it, else ``otherwise``."""

    requests: tuple[str, ...]
    otherwise: str = "default"

    def __repr__(self) -> str:
        return f"prefer({', '.join(map(repr, self.requests))}, otherwise={self.otherwise!r})"


def prefer(*requests: str, otherwise: str = "default") -> Preference:
    """A selector taking, for each subject, the first of ``requests`` that serves it, else ``otherwise``.

    >>> swap_conv2d(model, prefer("winograd"), sample_input_shape=(1, 3, 224, 224))
    """
    for request in (*requests, otherwise):
        if not isinstance(request, str):
            raise SelectorError(f"prefer: each request must be a string such as 'winograd' or 'dnnl:direct' "
                                f"(several as prefer('a', 'b'), not a list); got {type(request).__name__} {request!r}")
    return Preference(tuple(requests), otherwise)


Selector = Union[None, str, Sequence[str], Mapping[Any, Any], Callable[..., Any], Preference]
Check = Callable[[Subject, str], None]
"""A front end's test that ``request`` serves ``subject`` (its attributes, a selection on known
shapes); raises an `AlgoswapError` saying why not. It checks only what it can tell."""


def selector_argument(caller: str, algorithm: Any, **old: Any) -> Any:
    """The selector given as ``algorithm=`` or under one of its old names; two of them is an error."""
    given = {name: value for name, value in (("algorithm", algorithm), *old.items()) if value is not None}
    if len(given) > 1:
        names = " and ".join(f"{name}=" for name in given)
        raise SelectorError(f"{caller}: got {names}; pass one (algos= and algorithms= are old names of algorithm=)")
    return next(iter(given.values()), None)


def assign(caller: str, subjects: Sequence[Subject], selector: Selector, backends: Sequence[str] | None = None,
           check: Check | None = None, *, in_torch: bool = False, registry_requests: bool = True) -> list[str]:
    """One validated request per subject (see the module's docstring); errors name the subject.
    ``in_torch``: the front end can leave a subject in PyTorch, so ``"torch"`` is a request it takes.
    ``registry_requests=False``: the requests name no registry implementation (a ``swap_with`` class takes
    them as they are), so only their form is checked."""
    return _Resolver(caller, list(subjects), check, in_torch, registry_requests).run(selector, _checked_backends(caller, backends))


def refused(caller: str, subjects: Sequence[Subject], check: Check | None = None) -> list[tuple[Subject, str]]:
    """Every subject whose own request does not serve it, with why: what `assign` without a selector
    refuses, all at once rather than at the first."""
    resolver = _Resolver(caller, list(subjects), check, in_torch=False, registry_requests=True)
    reasons = [None if s.own is None else resolver._serves(i, s.own) for i, s in enumerate(resolver.subjects)]
    return [(s, why) for s, why in zip(resolver.subjects, reasons) if why is not None]


def _checked_backends(caller: str, backends: Sequence[str] | None) -> list[str] | None:
    if backends is None:
        return None
    if isinstance(backends, str) or not all(isinstance(b, str) for b in backends):
        raise SelectorError(f"{caller}: backends must be a list of backend names such as ['dnnl', 'numpy']; got {backends!r}")
    registry = _registry()
    for name in backends:
        if name not in registry.backends:
            raise SelectorError(f"{caller}: backends: {registry.absent_backend(name)}")
    return list(backends)


def _registry() -> Any:
    from ._global import get_registry

    return get_registry()


class _Resolver:
    """One call of `assign`: the requests given so far, by subject position."""

    def __init__(self, caller: str, subjects: list[Subject], check: Check | None, in_torch: bool, registry_requests: bool) -> None:
        self.caller, self.subjects, self.check, self.in_torch = caller, subjects, check, in_torch
        self.registry_requests = registry_requests
        self.given: list[Any] = [None] * len(subjects)
        self.prefers: str | None = None
        self.registry = _registry()
        self.unknown: dict[tuple[str, str], str | None] = {}  # (op, request): why it names no implementation
        self.implementing: dict[str, set[str]] = {}  # op: the backends with an implementation of it

    def run(self, selector: Selector, backends: list[str] | None) -> list[str]:
        if isinstance(selector, Mapping):
            self._mapping(selector)
        elif isinstance(selector, str) and _preferred_backend(selector):
            self.prefers = _preferred_backend(selector)
            if backends is not None:
                raise SelectorError(f"{self.caller}: got the request {selector!r} and backends={backends!r}; give one "
                                    f"(backends={[self.prefers, *backends]!r} prefers {self.prefers}, then the others)")
        elif selector is not None:
            self._over(range(len(self.subjects)), selector, "")
        return [self._final(i, backends) for i in range(len(self.subjects))]

    # ------------------------------------------------------------------ the selector forms

    def _mapping(self, selector: Mapping[Any, Any]) -> None:
        """Op keys first (an op of the subjects wins over a subject of that name), then subjects' names."""
        ops = {s.op for s in self.subjects}
        named = {key for s in self.subjects for key in s.keys}
        registry_ops = self.registry.ops
        for key in selector:
            if key not in ops and key not in named and key not in registry_ops:
                names = list(dict.fromkeys(s.name for s in self.subjects))
                raise SelectorError(f"{self.caller}: no {_either(['op', *_noun_set(self.subjects)])} named {_shown(key)}"
                                    f"{suggest(str(key), sorted(ops) + names)} (ops: {', '.join(sorted(ops))}; "
                                    f"{_nouns(self.subjects)}: {', '.join(names)})")
        for key, value in selector.items():
            if key in ops:
                self._over([i for i, s in enumerate(self.subjects) if s.op == key], value, str(key))
        for key, value in selector.items():
            if key not in ops and key in named:
                self._names(range(len(self.subjects)), {key: value}, "")

    def _over(self, scope: Sequence[int], selector: Selector, op: str) -> None:
        """Requests from ``selector`` for the subjects at ``scope`` (all of ``op``, or of every op when "")."""
        if isinstance(selector, str):
            self._give(scope, lambda i: selector)
        elif isinstance(selector, Preference):
            self._check_preference(scope, selector)
            self._give(scope, lambda i: self._preferred(i, selector))
        elif isinstance(selector, Mapping):
            self._names(scope, selector, op)
        elif isinstance(selector, (list, tuple)):
            self._listed(scope, selector, op)
        elif callable(selector):
            self._give(scope, lambda i: self._called(i, selector))
        else:
            what = f"the {op} selector" if op else "algorithm"
            raise SelectorError(f"{self.caller}: {what} must be a string, a list, a dict, a function or prefer(...); "
                                f"got {type(selector).__name__}")

    def _give(self, scope: Sequence[int], request: Callable[[int], Any]) -> None:
        for i in scope:
            self.given[i] = request(i)

    def _names(self, scope: Sequence[int], selector: Mapping[Any, Any], op: str) -> None:
        chosen = [self.subjects[i] for i in scope]
        for key, value in selector.items():
            matched = [i for i in scope if key in self.subjects[i].keys]
            if not matched:
                names = list(dict.fromkeys(s.name for s in chosen))
                raise SelectorError(f"{self.caller}: no {_what(op, chosen, 1)} named {_shown(key)}"
                                    f"{suggest(str(key), names)} ({_what(op, chosen)}: {', '.join(names)})")
            self._over(matched, value, op)

    def _listed(self, scope: Sequence[int], selector: Sequence[Any], op: str) -> None:
        chosen = [self.subjects[i] for i in scope]
        if len(selector) != len(scope):
            names = ", ".join(s.name for s in chosen)
            raise SelectorError(f"{self.caller}: got {len(selector)} algorithms for {len(scope)} {_what(op, chosen)} "
                                f"(in forward order: {names})")
        for i, request in zip(scope, selector):
            self.given[i] = request

    def _called(self, i: int, function: Callable[..., Any]) -> Any:
        subject = self.subjects[i]
        args: tuple[Any, ...] = (subject.target,)
        if _positional_count(function) >= 2:
            args = (subject.target, self._shape(i, "the selector takes the input shape"))
        try:
            return function(*args)
        except AlgoswapError:
            raise
        except Exception as exc:
            raise SelectorError(f"{subject.where(self.caller)}: the selector raised {type(exc).__name__}: {exc}") from exc

    def _shape(self, i: int, why: str) -> Shape:
        subject = self.subjects[i]
        if subject.input_shape is None:
            raise SelectorError(f"{subject.where(self.caller)}: {why}; pass sample_input_shape (batch included)")
        return subject.input_shape

    def _check_preference(self, scope: Sequence[int], preference: Preference) -> None:
        """Refuse a preferred request that names no implementation of any op it is given for (a typo)."""
        ops = sorted({self.subjects[i].op for i in scope})
        for request in preference.requests:
            if request == IN_TORCH:
                continue
            reasons = [self._unknown(op, request) for op in ops]
            if ops and None not in reasons:
                raise SelectorError(f"{self.caller}: {preference!r}: {request!r} serves no {' or '.join(ops)}: {reasons[0]}")

    def _preferred(self, i: int, preference: Preference) -> str:
        self._shape(i, f"{preference!r} chooses by the input shape")
        for request in preference.requests:
            if self._serves(i, request) is None:
                return request
        return preference.otherwise

    # ------------------------------------------------------------------ validation and preferences

    def _final(self, i: int, backends: list[str] | None) -> str:
        subject = self.subjects[i]
        if self.given[i] is not None:
            return self._validated(i, self.given[i])
        if subject.own is not None:
            return self._validated(i, subject.own)
        if self.prefers is not None:
            return self._validated(i, self._backend_default(subject, self.prefers))
        if backends is not None:
            return self._first_backend(i, backends)
        return self._validated(i, "default")

    def _validated(self, i: int, request: Any) -> str:
        subject = self.subjects[i]
        if not isinstance(request, str):
            raise SelectorError(f"{subject.where(self.caller)}: the selector returned {request!r}; "
                                "expected a string such as 'default' or 'numpy:smm'")
        reason = self._serves(i, request)
        if reason is not None:
            raise SelectorError(f"{subject.where(self.caller)}: {reason}") from None
        return request

    def _serves(self, i: int, request: str) -> str | None:
        """None when ``request`` is known for the subject's op and passes the front end's check, else why not."""
        subject = self.subjects[i]
        if request == IN_TORCH:
            return None if self.in_torch else (f"'torch' (leave it in PyTorch) is a request for the layers of a torch model "
                                               f"(swap_conv2d, swap_operation, swap_backend); {self.caller} runs no PyTorch")
        if request != "default":  # the absence of a request: selection reports an op nothing serves
            reason = self._unknown(subject.op, request)
            if reason is not None:
                return reason
        try:
            if self.check is not None:
                self.check(subject, request)
        except AlgoswapError as exc:
            return str(exc)
        return None

    def _unknown(self, op: str, request: str) -> str | None:
        if not self.registry_requests:
            return None
        if (op, request) not in self.unknown:
            try:
                check_known(self.registry, op, request)
                self.unknown[op, request] = None
            except AlgoswapError as exc:
                self.unknown[op, request] = str(exc)
        return self.unknown[op, request]

    def _backend_default(self, subject: Subject, backend: str) -> str:
        if backend in self._implementing(subject.op):
            return f"{backend}:default"
        LOG.debug("%s: %s %r (%s): %s has no %s implementation; using 'default'", self.caller, subject.noun,
                  subject.name, subject.op, backend, subject.op)
        return "default"

    def _implementing(self, op: str) -> set[str]:
        if op not in self.implementing:
            self.implementing[op] = {impl.backend for impl in self.registry.implementations(op)}
        return self.implementing[op]

    def _first_backend(self, i: int, backends: list[str]) -> str:
        subject = self.subjects[i]
        implementing = self._implementing(subject.op)
        candidates = [b for b in backends if b in implementing and self.registry.backends[b].availability() is True]
        if not candidates:
            states = [f"{b} ({'unavailable' if b in implementing else f'no {subject.op}'})" for b in backends]
            raise SelectorError(f"{subject.where(self.caller)}: none of backends={backends!r} can run it: {', '.join(states)}; "
                                f"{subject.op} is implemented by {', '.join(sorted(implementing)) or 'no backend'}")
        reasons = []
        for backend in candidates:
            reason = self._serves(i, f"{backend}:default")
            if reason is None:
                return f"{backend}:default"
            reasons.append(f"  {backend}:default: {reason}")
        raise SelectorError(f"{subject.where(self.caller)}: no backend of backends={backends!r} serves it:\n" + "\n".join(reasons))


def _preferred_backend(request: str) -> str | None:
    """"dnnl" for "dnnl:default" (a whole-model string naming a backend's default), else None."""
    backend, _, algorithm = request.partition(":")
    return backend if algorithm == "default" and backend else None


def _noun_set(subjects: Sequence[Subject]) -> list[str]:
    return sorted({s.noun for s in subjects}) or ["layer"]


def _nouns(subjects: Sequence[Subject], count: int = 2) -> str:
    """"layers", "nodes" or "layers and nodes" (count 1: "layer or node")."""
    nouns = _noun_set(subjects)
    return _either(nouns) if count == 1 else " and ".join(f"{noun}s" for noun in nouns)


def _either(words: list[str]) -> str:
    """"a", "a or b", "a, b or c"."""
    return " or ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else words[0]


def _what(op: str, subjects: Sequence[Subject], count: int = 2) -> str:
    """"conv2d layers", "layers and nodes" (count 1: "conv2d layer"); the op is named when all are of one."""
    ops = {s.op for s in subjects}
    op = op or (next(iter(ops)) if len(ops) == 1 else "")
    return f"{op} {_nouns(subjects, count)}" if op else _nouns(subjects, count)


def _shown(key: Any) -> str:
    return repr(key) if isinstance(key, str) else f"{type(key).__name__} {getattr(key, 'name', key)!r}"


def _positional_count(function: Callable[..., Any]) -> int:
    """How many positional arguments ``function`` takes (1 when its signature cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in parameters)
