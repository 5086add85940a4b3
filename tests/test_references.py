"""Every lazy "module:attribute" reference of every installed plugin resolves to a callable, and
every family module a plugin registered (``add_family``) binds exactly the functions found in it.

Plugins register implementations, predicates, probes and memory-space functions as strings so that
discovery imports nothing heavy, and ``add_family`` finds a lazy module's functions in its compiled
code, unimported. This imports each module (the plugin's, CuPy's too where it is installed, with or
without a GPU), resolves each reference and names the ones that do not resolve."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

import algoswap
from algoswap import FAMILIES, Ref
from algoswap._families import function_names
from algoswap._names import ModuleNames
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


def test_every_reference_of_every_installed_plugin_is_bound_where_its_module_s_code_shows_it() -> None:
    """Read, not imported: a missing attribute is then found on a machine where the module cannot be imported
    (a name made through globals() could not be told from a missing one)."""
    names, unseen = ModuleNames(), []
    for where, ref in _references():
        module, _, attribute = (ref if isinstance(ref, str) else ref.target).partition(":")
        reading = names.reading(module)
        if isinstance(reading, ModuleNotFoundError) or attribute.split(".")[0] not in reading.names:
            unseen.append(f"{where}: {module}:{attribute}")
    assert not unseen, "\n".join(unseen)


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


def _family_function(impl: Any, module: str, loaded: Any) -> bool:
    """Whether ``impl`` is the function of its op in the family module ``module`` (``loaded``), or that
    function wrapped (``functools.wraps``: the reference computes half precision in float32 so)."""
    names = function_names(impl.op)
    if isinstance(impl.fn, str):
        return impl.fn in {f"{module}:{name}" for name in names}
    fn = getattr(impl.fn, "__wrapped__", impl.fn)
    return any(getattr(loaded, name, None) is fn for name in names)


def test_every_family_module_has_exactly_the_functions_registered_from_it() -> None:
    registry = algoswap.registry()
    checked = 0
    for backend in registry.backends:
        for family, module in registry.families(backend).items():
            loaded = importlib.import_module(module)
            present = {op for op in FAMILIES[family] if any(hasattr(loaded, name) for name in function_names(op))}
            registered = {i.op for i in registry.implementations(backend=backend)
                          if i.op in FAMILIES[family] and _family_function(i, module, loaded)}
            assert registered == present, f"{backend} {family} ({module})"
            checked += 1
    assert checked >= 30, "the installed plugins register their ops by family"


def test_the_names_read_from_a_module_s_code_are_those_its_import_binds() -> None:
    """Every family module of every installed plugin: the unimported reading agrees with the imported module."""
    registry = algoswap.registry()
    for backend in registry.backends:
        for module in registry.families(backend).values():
            loaded = importlib.import_module(module)
            unimported = ModuleNames().bound(module)  # read from its code, although it is imported now
            assert isinstance(unimported, frozenset), module
            for name in {n for ops in FAMILIES.values() for op in ops for n in function_names(op)} | {"kernel", "supports"}:
                assert (name in unimported) == hasattr(loaded, name), f"{module}.{name}"


def _load(register: Any) -> Any:
    import types

    from algoswap._plugins import PluginLoader
    from algoswap._records import PluginRecord
    from algoswap._registry import Registry

    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": "numpy"})
    loader.discover()
    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1", algoswap_register=register)
    record = loader.load(plugin, PluginRecord("refs", "refs-dist", "1.0"))
    assert record.status == "loaded", record.error
    return registry


NO_RLEU = ("cannot import its implementation 'algoswap_numpy.activation:rleu' (refs-dist 1.0): "
           "AttributeError: module 'algoswap_numpy.activation' has no attribute 'rleu'")


def test_an_implementation_given_as_a_ref_that_does_not_resolve_is_rejected_not_called() -> None:
    import numpy as np

    from algoswap._capabilities import build
    from algoswap._select import select

    def register(registry: Any) -> None:
        registry.add_backend("refs", priority=10)
        registry.add_implementation("relu", "direct", "refs", Ref("algoswap_numpy.activation:rleu"))

    registry = _load(register)
    assert build(registry, op="relu").to_dict()["ops"]["relu"]["backends"]["refs"]["direct"]["reason"] == NO_RLEU
    chosen = select(registry, "relu", [(3,)], ["float32"])
    assert chosen.impl.qualified == "numpy:direct" and dict(chosen.rejected)["refs:direct"] == NO_RLEU
    assert np.array_equal(chosen.impl.callable(np.array([-1.0, 2.0])), [0.0, 2.0])


def test_a_backend_whose_memory_space_does_not_resolve_is_unavailable_saying_why() -> None:
    from algoswap import MemorySpace

    space = MemorySpace("boxes", "numpy.ndarray", to_host="algoswap_numpy.activation:to_hots", from_host="algoswap:Ref")
    registry = _load(lambda registry: registry.add_backend("boxes", memory=space))
    assert registry.backends["boxes"].availability() == (
        "cannot import its memory space's to_host 'algoswap_numpy.activation:to_hots' (refs-dist 1.0): "
        "AttributeError: module 'algoswap_numpy.activation' has no attribute 'to_hots'")
    assert registry.backends["boxes"].status == "unavailable"


BINDING_UNSEEN = {  # module source -> how it binds "made" without a store its code shows
    "globals": 'globals().update({"ma" + "de": abs})\n',
    "vars": 'vars()["made"] = abs\n',
    "exec": 'exec("made = abs")\n',
    "sys_modules": 'import sys\nsetattr(sys.modules[__name__], "made", abs)\n',
    "in_a_function": 'def _define():\n    globals()["made"] = abs\n\n\n_define()\n',
    "getattr": 'def __getattr__(name):\n    return abs\n',
}


@pytest.mark.parametrize("case", list(BINDING_UNSEEN))
def test_a_name_bound_in_a_way_its_code_cannot_show_is_unknown_never_missing(case: str, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"refs_unseen_{case}"
    (tmp_path / f"{module}.py").write_text("def named(x):\n    return x\n\n\n" + BINDING_UNSEEN[case])
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ModuleNames()
    assert (names.binds(module, "named"), names.binds(module, "made")) == (True, None)
    assert names.problem(f"{module}:made") is None and names.bound(module) is None
    assert module not in sys.modules
    assert resolve_ref(f"{module}:made") is abs  # it was there


def test_a_name_no_code_of_its_module_binds_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Top-level stores and a function's ``global`` stores bind; reading another module from ``sys.modules``
    does not make the module's other names unknown."""
    source = ("import sys\nmade = abs\n\n\ndef _define():\n    global defined\n    defined = abs\n\n\n"
              "OTHER = sys.modules.get('os')\n")
    (tmp_path / "refs_complete.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ModuleNames()
    assert [names.binds("refs_complete", name) for name in ("made", "defined", "madee")] == [True, True, False]
    assert str(names.problem("refs_complete:madee")) == "module 'refs_complete' has no attribute 'madee'"


def test_the_signature_read_from_a_reference_s_code_is_the_imported_function_s() -> None:
    """Every implementation of every installed plugin registered by reference whose code shows its function
    (a def, an alias, a factory's function): check-plugin judges a backend that cannot run here by that."""
    import inspect

    from algoswap._check_code import CodeReader, written_signature

    reader, compared = CodeReader(), 0
    for impl in algoswap.registry().implementations():
        if isinstance(impl.fn, (str, Ref)):
            target = impl.fn if isinstance(impl.fn, str) else impl.fn.target
            node = reader.definition(target)
            if node is None:
                continue
            imported = inspect.signature(resolve_ref(target)).parameters.values()
            read = written_signature(node).parameters.values()
            assert [(p.name, p.kind, p.default is p.empty) for p in read] == [
                (p.name, p.kind, p.default is p.empty) for p in imported], f"{impl.qualified} {impl.op}: {target}"
            compared += 1
    assert compared > 250, compared
