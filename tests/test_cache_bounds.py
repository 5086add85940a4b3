"""Every core cache is an LRUCache of a declared kind, bounded by its size, whatever the number of
distinct input shapes a program sees; a swap_backend Model's weights are frozen (backends may keep
data derived from them). Entries are counted, not memory: deterministic."""

from __future__ import annotations

import pickle
import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from algoswap._plugins import PluginLoader
from algoswap._records import PluginRecord
from algoswap._registry import Registry
from algoswap._select import select

CORE_KINDS = ("selections", "ops_calls", "torch_calls", "graph_programs", "graph_captures")
LIMIT = 5
SHAPES = 3 * LIMIT


@pytest.fixture
def small_caches() -> Iterator[None]:
    """Every core kind limited to LIMIT entries (restored after the test)."""
    limits = algoswap.cache_limits()
    before = {name: limits[name].size for name in CORE_KINDS}
    for name in CORE_KINDS:
        algoswap.set_cache_limit(name, LIMIT)
    yield
    for name, size in before.items():
        algoswap.set_cache_limit(name, size)


def test_the_core_kinds_are_declared_documented_and_configurable() -> None:
    limits = algoswap.cache_limits()
    for name in CORE_KINDS:
        assert limits[name].size > 0 and limits[name].doc, name
    with pytest.raises(KeyError, match="no cache kind named 'selection'"):
        algoswap.set_cache_limit("selection", 10)


def _prepared(kind: str) -> Any:
    return algoswap.registry().selection_cache.prepared(algoswap.cache_limits()[kind])


def test_ops_calls_and_selections_stay_bounded(small_caches: None, rng: np.random.Generator) -> None:
    cache = algoswap.registry().selection_cache
    for n in range(1, SHAPES + 1):
        algoswap.ops.relu(rng.standard_normal((n, 3)).astype(np.float32))
    assert len(_prepared("ops_calls")) == LIMIT and len(cache) == LIMIT
    for n in range(1, SHAPES + 1):
        algoswap.select("relu", [(n, 4)])
    assert len(cache) == LIMIT


def test_a_registry_change_empties_the_front_end_caches_too(rng: np.random.Generator) -> None:
    algoswap.ops.relu(rng.standard_normal(3))
    cache = algoswap.registry().selection_cache
    assert len(_prepared("ops_calls")) and len(cache)
    algoswap.reload_plugins()
    cache = algoswap.registry().selection_cache
    assert not len(_prepared("ops_calls")) and not len(cache) and not len(_prepared("torch_calls"))


def test_a_registry_change_empties_every_front_ends_prepared_calls() -> None:
    """A front end's cache of calls prepared from selections, of any declared kind, is emptied with the
    selections when a plugin registers (its selections may no longer be the right ones)."""
    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": "numpy"})
    loader.discover()
    select(registry, "relu", [(3,)], ["float32"])
    kind = algoswap.declare_cache("test_front_end_calls", 8, "a test front end's calls")
    mine = registry.selection_cache.prepared(kind)
    mine.put("call", "prepared")
    assert registry.selection_cache.prepared(kind) is mine and len(registry.selection_cache) == 1
    late = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=lambda registry: None)
    loader.load(late, PluginRecord("late"))
    assert not len(mine) and not len(registry.selection_cache)


torch = pytest.importorskip("torch")
nn = torch.nn


def _tiny() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten()).eval()


def test_swapped_layers_calls_stay_bounded(small_caches: None) -> None:
    model = algoswap.swap_operation("relu", algoswap.swap_conv2d(_tiny()))
    for n in range(1, SHAPES + 1):
        with torch.no_grad():
            model(torch.randn(1, 2, n + 2, 4))
    assert len(_prepared("torch_calls")) == LIMIT


def test_a_models_programs_stay_bounded(small_caches: None) -> None:
    model = algoswap.swap_backend(_tiny())
    for n in range(1, SHAPES + 1):
        model(torch.randn(1, 2, n + 2, 4))
    assert len(model.executor.programs) == LIMIT


def test_graph_programs_stay_bounded(small_caches: None, rng: np.random.Generator) -> None:
    x = g.placeholder("x", (1, 3))
    executor = g.Executor([g.relu(x)])
    for n in range(1, SHAPES + 1):
        executor.run(feed={x: rng.standard_normal((n, 3)).astype(np.float32)})
    assert len(executor.programs) == LIMIT


def test_a_models_weights_are_frozen_also_after_unpickling() -> None:
    model = algoswap.swap_backend(_tiny(), sample_input_shape=(1, 2, 5, 5))
    assert model.constants and all(algoswap.is_frozen(array) for array in model.constants.values())
    again = pickle.loads(pickle.dumps(model))
    assert all(algoswap.is_frozen(array) for array in again.constants.values())
    x = torch.randn(1, 2, 5, 5)
    assert torch.equal(again(x), model(x))


def test_each_cache_evicts_only_its_own_least_recently_used_entries(small_caches: None, rng: np.random.Generator) -> None:
    """Filling one front end's cache leaves the others' entries; the selections go one by one, the least
    recently used first, never all at once."""
    with torch.no_grad():
        algoswap.swap_operation("relu", nn.ReLU())(torch.randn(2, 2))
    in_torch = _prepared("torch_calls").keys()
    kept = algoswap.select("relu", [(1, 3)], "float32")
    for n in range(1, SHAPES + 1):
        assert algoswap.select("relu", [(1, 3)], "float32") is kept  # the most recently used, throughout
        algoswap.ops.relu(rng.standard_normal((n, 2)).astype(np.float32))
    cache = algoswap.registry().selection_cache
    assert _prepared("torch_calls").keys() == in_torch and len(_prepared("ops_calls")) == LIMIT and len(cache) == LIMIT
    assert algoswap.select("relu", [(1, 3)], "float32") is kept


def test_every_front_end_gets_its_selection_from_the_one_selection_cache(rng: np.random.Generator) -> None:
    """algoswap.select, algoswap.ops and a swapped torch layer serving the same call share one entry of
    the selection cache: the same Selection object."""
    x = rng.standard_normal((3, 5)).astype(np.float32)
    shown = algoswap.select("relu", [x.shape], "float32")
    with algoswap.trace() as through_ops:
        algoswap.ops.relu(x)
    from algoswap._torch.bridge import selection_for

    in_torch = selection_for("relu", "default", "{}", [torch.from_numpy(x)])  # what a swapped layer runs
    assert len(through_ops) == 1 and through_ops[0] is shown and in_torch is shown
