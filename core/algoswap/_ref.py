"""Lazy references to callables: "module:attribute", imported on first use.

Plugins name their implementations, predicates, kernel-name functions, probes and memory-space
functions this way, so that discovery imports nothing heavy. A plain string is accepted where the
argument can only be a callable (an implementation, a predicate, a probe); ``Ref`` is the one form
accepted everywhere, also where a string would mean something else (a kernel's literal name), and
it can carry arguments passed after the call's own.
"""

from __future__ import annotations

import importlib
from typing import Any


def resolve_ref(ref: Any) -> Any:
    """A callable as it is (a ``Ref`` too), or 'module:attribute' imported now."""
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


class Ref:
    """``Ref("pkg.conv:supports_cudnn", "guess")``: a callable that imports ``pkg.conv`` at its first
    call and calls ``supports_cudnn(*call_args, "guess")``."""

    __slots__ = ("target", "args", "_resolved")

    def __init__(self, target: str, *args: Any) -> None:
        if not isinstance(target, str) or ":" not in target:
            raise TypeError(f"Ref needs a 'module:attribute' string, got {target!r}")
        self.target, self.args = target, args
        self._resolved: Any = None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    def resolve(self) -> Any:
        """The referenced object (imported now, then kept)."""
        if self._resolved is None:
            self._resolved = resolve_ref(self.target)
        return self._resolved

    def __call__(self, *call_args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*call_args, *self.args, **kwargs)

    def __repr__(self) -> str:
        extra = "".join(f", {a!r}" for a in self.args)
        return f"Ref({self.target!r}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and (self.target, self.args) == (other.target, other.args)

    def __hash__(self) -> int:
        return hash((self.target, self.args))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ref, (self.target, *self.args))
