"""Ownership: the reference backend cannot be displaced, a contested name goes to none of its
claimants whatever the order they load in, records are read-only to plugins that did not register
them, and the same distribution found twice on sys.path is one plugin, not a clash."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap import _plugins
from algoswap._plugins import PluginLoader
from algoswap._records import ImplRecord, PluginRecord
from algoswap._ownership import refused_claims
from algoswap._registry import Registrar, Registry
from algoswap._select import select

from .conftest import NUMPY_OWNER, Installed, plugin_records


def numpy_is_intact(registry: Registry) -> None:
    backend = registry.backends["numpy"]
    assert (backend.plugin, backend.distribution, backend.priority, registry.owner_of("numpy")) == (
        "numpy", "algoswap-numpy", 0, NUMPY_OWNER)
    relu = registry.impls[("relu", "direct", "numpy")]
    assert relu.plugin == "numpy" and relu.callable.__module__ == "algoswap_numpy.activation"
    assert select(registry, "relu", [(3,)], ["float32"], algorithm="numpy:default").impl is relu


def test_a_plugin_loaded_before_numpy_cannot_take_over_the_reference_backend(discover: Any) -> None:
    registry = discover(ALGOSWAP_PLUGINS="a_takeover,numpy")
    records = plugin_records(registry)
    assert [p.name for p in registry.plugins if p.status != "disabled"] == ["a_takeover", "numpy"]  # it loads first
    assert records["a_takeover"].status == "broken"
    assert records["a_takeover"].error == (
        f"backend 'numpy' is the reference backend, declared by {NUMPY_OWNER}; algoswap-test-takeover 0.1.0 may not declare it")
    numpy_is_intact(registry)
    assert registry.reference is registry.backends["numpy"]


def test_with_the_reference_disabled_its_name_is_an_ordinary_one(discover: Any) -> None:
    """The core knows the reference by its role, not by a name: without algoswap-numpy there is no
    reference, and the two plugins declaring "numpy" contest it like any other name."""
    registry = discover(ALGOSWAP_DISABLE_PLUGINS="numpy")
    assert "numpy" not in registry.backends and registry.reference is None
    records = plugin_records(registry)
    for me, other in (("a_takeover", "algoswap-test-clash 0.3.0"), ("test_clash", "algoswap-test-takeover 0.1.0")):
        assert (records[me].status, records[me].error) == ("broken", (
            f"backend 'numpy' is also declared by {other}: a name several plugins declare goes to none of them "
            "(disable or uninstall all but one)"))


def test_a_second_reference_backend_is_refused_naming_both(discover: Any) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy")
    late = types.SimpleNamespace(algoswap_api_version=lambda: ">=1",
                                 algoswap_register=lambda registry: registry.add_backend("truth", reference=True))
    record = PluginLoader(registry, env={}).load(late, PluginRecord("late", "late-dist", "2.0"))
    assert (record.status, record.error) == ("broken", (
        f"backend 'truth' (late-dist 2.0) declares itself the reference backend, but 'numpy' ({NUMPY_OWNER}) is: "
        "at most one backend is"))
    assert "truth" not in registry.backends and registry.reference is registry.backends["numpy"]


def test_reference_claims_staged_together_all_fail_whatever_the_order() -> None:
    def staged(name: str, backend: str) -> Registrar:
        registrar = Registrar(Registry().ops, PluginRecord(name, f"{name}-dist", "1.0"))
        registrar.add_backend(backend, reference=True)
        return registrar

    first, second = staged("one", "ref_one"), staged("two", "ref_two")
    for order in ([first, second], [second, first]):
        reasons = dict(zip((r.plugin.name for r in order), refused_claims(Registry(), order)))
        assert reasons == {
            "one": "backend 'ref_one' (one-dist 1.0) and 'ref_two' (two-dist 1.0) each declare themselves the reference "
                   "backend: at most one backend is, so none of them is taken (disable or uninstall all but one)",
            "two": "backend 'ref_two' (two-dist 1.0) and 'ref_one' (one-dist 1.0) each declare themselves the reference "
                   "backend: at most one backend is, so none of them is taken (disable or uninstall all but one)"}


def test_one_plugin_declaring_two_reference_backends_is_broken() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("truth", reference=True)
        registry.add_backend("more_truth", reference=True)

    record = PluginLoader(Registry(), env={}).load(types.SimpleNamespace(algoswap_api_version=lambda: ">=1", algoswap_register=register),
                                                   PluginRecord("double", "double-dist", "1.0"))
    assert (record.status, record.error) == ("broken", "RegistrationError: backends 'truth' and 'more_truth' of double-dist 1.0 "
                                                       "both declare themselves the reference: at most one backend is")


@pytest.mark.parametrize("order", ["by name", "reversed"])
def test_a_contested_backend_goes_to_neither_claimant_in_any_order(
        discover: Any, monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    if order == "reversed":
        by_name = _plugins._entry_points
        monkeypatch.setattr(_plugins, "_entry_points", lambda: list(reversed(list(by_name()))))
    registry = discover(ALGOSWAP_PLUGINS="numpy,rival_a,rival_b")
    records = plugin_records(registry)
    assert "rival" not in registry.backends
    for me, other in (("rival_a", "algoswap-test-rival-b 0.2.0"), ("rival_b", "algoswap-test-rival-a 0.1.0")):
        assert (records[me].status, records[me].error) == ("broken", (
            f"backend 'rival' is also declared by {other}: a name several plugins declare goes to none of them "
            "(disable or uninstall all but one)"))
    with pytest.raises(algoswap.NoImplementationError) as error:
        select(registry, "relu", [(3,)], ["float32"], algorithm="rival:direct")
    assert str(error.value).startswith("relu: 'rival:direct': backend 'rival' is not loaded: its plugin 'rival_")
    assert "its plugin 'rival_a' (algoswap-test-rival-a 0.1.0) is broken: backend 'rival' is also declared" in str(error.value)
    assert "its plugin 'rival_b' (algoswap-test-rival-b 0.2.0) is broken: backend 'rival' is also declared" in str(error.value)


def test_one_rival_alone_gets_the_name(discover: Any) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy,rival_b")
    assert registry.backends["rival"].distribution == "algoswap-test-rival-b"


def test_a_plugin_cannot_rewrite_other_records_through_its_registrar(discover: Any) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_good,test_meddler")
    assert plugin_records(registry)["test_meddler"].status == "loaded"
    assert registry.backends["meddler"].availability() is True  # its probe meddles once more, after commit
    attempts = sys.modules["algoswap_test_meddler"].ATTEMPTS
    assert attempts == {
        f"{when}: {what}": refusal
        for when in ("registration", "after commit")
        for what, refusal in (("registrar._registry", "refused: AttributeError"),
                              ("_known_ops['relu'] = ...", "refused: TypeError"),
                              ("_known_ops['relu'].shape_rule = ...", "refused: FrozenInstanceError"),
                              ("registrar.plugin.distribution = ...", "refused: FrozenInstanceError"))
    } | {"after commit: own backend record priority = ...": "refused: FrozenInstanceError"}
    numpy_is_intact(registry)
    assert registry.backends["toy"].distribution == "algoswap-test-good"


def test_records_smuggled_into_the_staging_area_are_refused() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("smuggler")
        forged = ImplRecord("relu", "direct", "numpy", abs, plugin=registry.plugin.name)
        registry._impls[forged.key] = forged  # past add_implementation, onto a backend it did not declare

    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": "numpy", "ALGOSWAP_PLUGIN_TIMEOUT": "0"})
    loader.discover()
    record = loader.load(types.SimpleNamespace(algoswap_api_version=lambda: ">=1", algoswap_register=register),
                         PluginRecord("smuggler", "smuggler-dist", "1.0"))
    assert record.status == "broken" and "staged by smuggler-dist 1.0 for a backend it did not declare" in record.error
    assert "smuggler" not in registry.backends
    numpy_is_intact(registry)


def test_a_late_plugin_cannot_claim_a_loaded_backend(discover: Any) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_good")
    late = types.SimpleNamespace(algoswap_api_version=lambda: ">=1", algoswap_register=lambda registry: registry.add_backend("toy"))
    record = PluginLoader(registry, env={}).load(late, PluginRecord("late", "late-dist", "2.0"))
    assert (record.status, record.error) == ("broken", "backend 'toy' is declared by both algoswap-test-good 1.2.0 and late-dist 2.0")
    assert registry.backends["toy"].distribution == "algoswap-test-good"


def test_the_process_registry_offers_no_mutation(rng: np.random.Generator) -> None:
    registry = algoswap.registry()
    backend, impl = registry.backends["numpy"], registry.impls[("relu", "direct", "numpy")]
    for mutate in (
        lambda: registry.backends.__setitem__("numpy", backend),
        lambda: registry.backends.__delitem__("numpy"),
        lambda: registry.impls.__setitem__(impl.key, impl),
        lambda: registry.ops.__setitem__("relu", registry.ops["relu"]),
        lambda: registry.unsupported.clear(),  # type: ignore[attr-defined]
        lambda: registry.plugins.append(registry.plugins[0]),  # type: ignore[attr-defined]
    ):
        with pytest.raises((TypeError, AttributeError)):
            mutate()
    for name in ("ops", "backends", "impls", "unsupported", "plugins"):
        with pytest.raises(AttributeError, match="read-only|can't set|has no setter"):
            setattr(registry, name, {})
    for record, field in ((backend, "priority"), (impl, "fn"), (registry.plugins[0], "status")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, None)
    x = rng.standard_normal(4).astype(np.float32)
    assert np.array_equal(algoswap.ops.relu(x, algorithm="numpy:direct"), np.maximum(x, 0))


def test_the_same_distribution_found_twice_is_one_plugin(discover: Any, installed: Installed, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    again = tmp_path / "again"
    again.mkdir()
    for entry in installed.site.glob("algoswap_test_good*"):
        shutil.copytree(entry, again / entry.name) if entry.is_dir() else shutil.copy(entry, again)
    monkeypatch.syspath_prepend(str(again))  # test_good is now on sys.path twice
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_good")
    assert [p.name for p in registry.plugins if p.name == "test_good"] == ["test_good"]
    assert plugin_records(registry)["test_good"].status == "loaded" and "toy" in registry.backends


def test_duplicate_entry_points_count_once(discover: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = importlib.metadata.entry_points(group=_plugins.GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [*listed, *listed])  # as another finder might
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_good")
    assert [p.name for p in registry.plugins].count("test_good") == 1
    assert plugin_records(registry)["test_good"].status == "loaded"
