"""The plugin system in-process: a fresh ``Registry`` run through ``PluginLoader`` with an explicit
environment, the throwaway plugins (see conftest.py) on ``sys.path``."""

from __future__ import annotations

import importlib
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap import _global
from algoswap._plugins import ENV_ALLOW, ENV_DENY, ENV_STRICT
from algoswap._select import select
from helpers import assert_close
from helpers import assert_op_close

from .conftest import DENY_FAILING, EXPECTED, FAILING, MODULES, NUMPY_OWNER, Installed, imported, plugin_records


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Stride 1, no padding, float64, independent of every backend."""
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape[2:], axis=(2, 3))
    return np.einsum("ncijhw,ochw->noij", windows, w.astype(np.float64)) + b[None, :, None, None]


# ----------------------------------------------------------------------------- in-process discovery


def test_the_test_plugins_install(installed: Installed) -> None:
    # how long it took is not asserted: on CI's two shared cores, a time limit is a matter of chance
    assert sorted(p.name for p in installed.site.glob("*.dist-info")) == sorted(
        f"{EXPECTED[n][0].replace('-', '_')}-{EXPECTED[n][1]}.dist-info" for n in EXPECTED if n != "numpy")


def test_every_plugin_is_listed_with_its_status_and_error(discover: Any, import_log: Path) -> None:
    registry = discover()
    records = plugin_records(registry)
    for name, (distribution, version, status, fragments) in EXPECTED.items():
        record = records[name]
        assert (record.distribution, record.version, record.status) == (distribution, version, status), record
        for fragment in fragments:
            assert fragment in record.error, (name, record.error)
        if status == "loaded":
            assert record.error == "" and record.trace == ""
    assert records["test_good"].backends == ("toy", "toy_offline")
    assert records["test_good"].api_range == ">=1,<2"
    assert "boom at import" in records["test_broken"].trace
    assert "boom during registration" in records["test_raising"].trace
    # each plugin was imported, once, on its own; the broken one did not stop the others
    assert sorted(imported(import_log)) == sorted(MODULES)


def test_failed_plugins_register_nothing(discover: Any) -> None:
    registry = discover()
    records = plugin_records(registry)
    for name in FAILING:
        assert records[name].backends == (), name
    # registration is atomic: test_raising had called add_backend/add_implementation before raising
    assert "raising" not in registry.backends
    assert "oldapi" not in registry.backends
    assert not [i for i in registry.impls.values() if i.plugin in FAILING]
    assert not [u for u in registry.unsupported.values() if u.plugin in FAILING]
    # the clash did not take over the numpy backend or any of its implementations
    numpy_backend = registry.backends["numpy"]
    assert (numpy_backend.plugin, numpy_backend.distribution, numpy_backend.priority) == ("numpy", "algoswap-numpy", 0)
    assert registry.owner_of("numpy") == NUMPY_OWNER
    direct = registry.impls[("conv2d", "direct", "numpy")]
    assert direct.plugin == "numpy" and direct.callable.__module__ == "algoswap_numpy.conv"
    assert {"numpy", "toy", "toy_offline"} <= set(registry.backends)


def test_numpy_backend_still_works_next_to_failing_plugins(discover: Any, rng: np.random.Generator) -> None:
    registry = discover()
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    selection = select(registry, "conv2d", [x.shape, w.shape, b.shape], ["float32"] * 3, algorithm="numpy:default")
    assert selection.backend.name == "numpy"
    out = selection.impl.callable(x, w, b, **selection.call.attrs)
    assert out.dtype == np.float32
    assert_op_close("conv2d", out, conv2d_reference(x, w, b), [x, w, b], {})
    relu = select(registry, "relu", [x.shape], ["float32"], algorithm="numpy:default")
    assert relu.impl.qualified == "numpy:direct"
    assert_close(relu.impl.callable(x), np.maximum(x, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_toy_relu_is_selectable_and_correct(discover: Any, rng: np.random.Generator, dtype: type) -> None:
    registry = discover()
    x = rng.standard_normal((3, 5, 7)).astype(dtype)
    selection = select(registry, "relu", [x.shape], [np.dtype(dtype).name], algorithm="toy:direct")
    assert (selection.impl.qualified, selection.backend.name, selection.kernel) == ("toy:direct", "toy", "toy numpy.maximum")
    assert selection.backend.distribution == "algoswap-test-good" and selection.backend.version == "1.2.0"
    out = selection.impl.callable(x, **selection.call.attrs)
    assert out.dtype == dtype
    assert_close(out, np.maximum(x, 0))


def test_unavailable_backend_reports_its_reason(discover: Any) -> None:
    registry = discover()
    assert registry.backends["toy"].availability() is True
    assert registry.backends["toy_offline"].availability() == "no toy device here"
    with pytest.raises(algoswap.NoImplementationError, match="no toy device here") as error:
        select(registry, "relu", [(4, 4)], ["float32"], algorithm="toy_offline:direct")
    assert error.value.rejected == (("toy_offline:direct", "backend unavailable: no toy device here"),)
    # an unavailable backend is skipped, never chosen, by default selection
    assert select(registry, "relu", [(4, 4)], ["float32"], algorithm="direct").backend.name != "toy_offline"


@pytest.mark.parametrize("name", [n for n in FAILING if n != "rival_b"])  # rival_a's refusal is raised first
def test_strict_mode_turns_each_failure_into_plugin_error(discover: Any, name: str) -> None:
    distribution, version, status, fragments = EXPECTED[name]
    rivals = ",rival_a,rival_b" if name.startswith("rival_") else ""  # a contest needs both
    with pytest.raises(algoswap.PluginError) as error:
        discover(**{ENV_STRICT: "1", ENV_ALLOW: f"numpy,{name}{rivals}"})
    message = str(error.value)
    assert f"plugin {name!r} ({distribution} {version}) is {status}" in message
    for fragment in fragments:
        assert fragment in message


def test_strict_mode_stops_at_the_first_failure(discover: Any) -> None:
    with pytest.raises(algoswap.PluginError, match="a_takeover"):  # the first failing entry point, by name
        discover(**{ENV_STRICT: "1"})


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_strict_mode_off_values(discover: Any, value: str) -> None:
    records = plugin_records(discover(**{ENV_STRICT: value}))
    assert records["test_broken"].status == "broken"


def test_strict_mode_passes_when_the_failing_plugins_are_denied(discover: Any, import_log: Path) -> None:
    registry = discover(**{ENV_STRICT: "1", ENV_DENY: DENY_FAILING})
    records = plugin_records(registry)
    assert {n: records[n].status for n in EXPECTED} == {
        "numpy": "loaded", "test_good": "loaded", "test_meddler": "loaded", "test_families": "loaded",
        **{n: "disabled" for n in FAILING}}
    assert sorted(imported(import_log)) == ["algoswap_test_families", "algoswap_test_good", "algoswap_test_meddler"]


@pytest.mark.parametrize("allow", [
    "test_good",  # entry-point name
    "algoswap-test-good",  # distribution name
    "Algoswap_Test.Good",  # distribution name, spelt another way (PEP 503 normalisation)
    "test_good,no-such-plugin,",
])
def test_allow_list(discover: Any, import_log: Path, rng: np.random.Generator, allow: str) -> None:
    registry = discover(**{ENV_ALLOW: allow})
    records = plugin_records(registry)
    assert records["test_good"].status == "loaded"
    for name in EXPECTED.keys() - {"test_good"}:
        assert (records[name].status, records[name].error) == ("disabled", f"not listed in {ENV_ALLOW}"), name
    assert set(registry.backends) == {"toy", "toy_offline"}
    # disabled before import: only the allowed plugin was imported
    assert imported(import_log) == ["algoswap_test_good"]
    assert "algoswap_test_broken" not in sys.modules
    x = rng.standard_normal((16,)).astype(np.float32)
    selection = select(registry, "relu", [x.shape], ["float32"])
    assert selection.impl.qualified == "toy:direct"
    assert_close(selection.impl.callable(x), np.maximum(x, 0))


def test_allow_list_tolerates_spaces_after_commas(discover: Any) -> None:
    records = plugin_records(discover(**{ENV_ALLOW: "numpy, test_good"}))
    assert (records["numpy"].status, records["test_good"].status) == ("loaded", "loaded")


def test_allow_list_matching_nothing_disables_everything(discover: Any, import_log: Path) -> None:
    registry = discover(**{ENV_ALLOW: "no-such-plugin"})
    assert {p.status for p in registry.plugins} == {"disabled"}
    assert set(plugin_records(registry)) >= EXPECTED.keys()
    assert registry.backends == {} and registry.impls == {}
    assert imported(import_log) == []
    with pytest.raises(algoswap.NoImplementationError, match="no implementation is registered"):
        select(registry, "relu", [(3,)], ["float32"])


@pytest.mark.parametrize("deny", ["test_broken", "algoswap-test-broken", "numpy,algoswap_test_broken"])
def test_deny_list_disables_before_import(discover: Any, import_log: Path, deny: str) -> None:
    registry = discover(**{ENV_DENY: deny})
    records = plugin_records(registry)
    assert (records["test_broken"].status, records["test_broken"].error) == ("disabled", f"listed in {ENV_DENY}")
    assert records["test_broken"].trace == ""
    assert "algoswap_test_broken" not in imported(import_log)
    assert "algoswap_test_broken" not in sys.modules
    assert records["test_good"].status == "loaded"
    # with algoswap-numpy, "numpy" is the reference's name; without it, a name the two impostors contest
    assert (records["test_clash"].status, records["a_takeover"].status) == ("broken", "broken")
    assert ("numpy" in registry.backends) == ("numpy" not in deny)


def test_deny_list_wins_over_allow_list(discover: Any, import_log: Path) -> None:
    records = plugin_records(discover(**{ENV_ALLOW: "test_good,test_broken", ENV_DENY: "algoswap-test-broken"}))
    assert records["test_broken"].status == "disabled"
    assert records["test_good"].status == "loaded"
    assert imported(import_log) == ["algoswap_test_good"]


def test_installing_and_removing_a_plugin_changes_the_registry(
    installed: Installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """The process-wide registry (``algoswap.reload_plugins``): install -> appears, remove -> gone."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in installed.site.glob("algoswap_test_good*"):
        shutil.copytree(entry, site / entry.name) if entry.is_dir() else shutil.copy(entry, site)
    for variable in (ENV_ALLOW, ENV_DENY, ENV_STRICT):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(_global, "_registry", None)  # restored afterwards: no leak into other tests
    monkeypatch.syspath_prepend(str(site))
    x = rng.standard_normal((5, 6)).astype(np.float32)

    registry = algoswap.reload_plugins()
    assert registry is algoswap.registry()
    assert "toy" in registry.backends
    assert [p.name for p in algoswap.plugins() if p.name.startswith("test_")] == ["test_good"]
    assert_close(algoswap.ops.relu(x, algorithm="toy:direct"), np.maximum(x, 0))

    shutil.rmtree(next(site.glob("algoswap_test_good-*.dist-info")))  # "pip uninstall" (the module may linger)
    importlib.invalidate_caches()
    registry = algoswap.reload_plugins()
    assert "toy" not in registry.backends and "numpy" in registry.backends
    assert not [p for p in algoswap.plugins() if p.name.startswith("test_")]
    with pytest.raises(algoswap.NoImplementationError):
        algoswap.ops.relu(x, algorithm="toy:direct")


def test_each_failed_plugin_is_logged_once_as_a_warning(discover: Any, caplog: pytest.LogCaptureFixture) -> None:
    from algoswap import _log

    _log._warned.clear()
    with caplog.at_level(logging.WARNING, logger="algoswap"):
        discover()
        discover()  # a second discovery in the same process warns of nothing new
    warned = [r.getMessage() for r in caplog.records if r.name == "algoswap" and r.levelno == logging.WARNING]
    for name in FAILING:
        status = EXPECTED[name][2]
        mine = [m for m in warned if m.startswith(f"plugin {name!r} ")]
        assert len(mine) == 1 and f" is {status} and was skipped: " in mine[0], (name, warned)
    loaded = [name for name, (_, _, status, _) in EXPECTED.items() if status == "loaded"]
    assert not [m for m in warned if any(m.startswith(f"plugin {name!r} ") for name in loaded)], warned
