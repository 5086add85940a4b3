"""Every lazy "module:attribute" reference of every installed plugin resolves to a callable.

Plugins register implementations, predicates, probes and memory-space functions as strings so that
discovery imports nothing heavy; a typo there would only surface when the call is first made. This
resolves each one (importing the plugin's modules, CuPy's too where it is installed, with or without
a GPU) and names the ones that do not resolve."""

from __future__ import annotations

from typing import Any, Iterator

import algoswap
from algoswap import Ref
from algoswap._ref import resolve_ref


def _references() -> Iterator[tuple[str, str | Ref]]:
    registry = algoswap.registry()
    for impl in registry.implementations():
        for field in ("fn", "supports", "kernel"):
            ref = getattr(impl, field)
            if isinstance(ref, Ref) or (isinstance(ref, str) and field != "kernel"):  # a str kernel is its name
                yield f"{impl.qualified} ({impl.op}) {field}", ref
    for name, backend in registry.backends.items():
        if isinstance(backend.probe, str):
            yield f"backend {name} probe", backend.probe
        for field in ("to_host", "from_host", "from_dlpack"):
            ref = getattr(backend.memory, field, None)
            if isinstance(ref, str):
                yield f"backend {name} memory {field}", ref


def _problem(ref: str | Ref) -> str:
    try:
        value: Any = ref.resolve() if isinstance(ref, Ref) else resolve_ref(ref)
    except Exception as exc:  # noqa: BLE001 - every failure is reported
        return f"{type(exc).__name__}: {exc}"
    return "" if callable(value) else f"resolves to a {type(value).__name__}, not a callable"


def test_every_reference_of_every_installed_plugin_resolves() -> None:
    references = list(_references())
    assert len(references) > 100, "the installed plugins register their implementations by reference"
    problems = [f"{where}: {ref!r}: {problem}" for where, ref in references if (problem := _problem(ref))]
    assert not problems, "\n".join(problems)


def test_a_reference_that_does_not_resolve_is_named() -> None:
    assert "AttributeError" in _problem("algoswap_numpy:no_such_function")
    assert "ModuleNotFoundError" in _problem("algoswap_no_such_module:f")
    assert "not a callable" in _problem("algoswap:__all__")
    assert "AttributeError" in _problem(Ref("algoswap_numpy:no_such_function", 1))


def test_a_ref_imports_at_its_first_call_and_passes_its_arguments_after_the_call_s() -> None:
    ref = Ref("operator:sub", 1)
    assert ref(10) == 9 and repr(ref) == "Ref('operator:sub', 1)" and ref == Ref("operator:sub", 1)
    import pickle

    assert pickle.loads(pickle.dumps(ref))(5) == 4
