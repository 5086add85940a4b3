"""Every core cache is an LRUCache of a declared kind, bounded by its size, whatever the number of
distinct input shapes a program sees; a swap_backend Model's weights are frozen (backends may keep
data derived from them). Entries are counted, not memory: deterministic."""

from __future__ import annotations

import pickle
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g

CORE_KINDS = ("selections", "ops_calls", "torch_calls", "graph_programs")
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


def test_ops_calls_and_selections_stay_bounded(small_caches: None, rng: np.random.Generator) -> None:
    cache = algoswap.registry().selection_cache
    for n in range(1, SHAPES + 1):
        algoswap.ops.relu(rng.standard_normal((n, 3)).astype(np.float32))
    assert len(cache.ops) == LIMIT and len(cache) == LIMIT
    for n in range(1, SHAPES + 1):
        algoswap.select("relu", [(n, 4)])
    assert len(cache) == LIMIT


def test_a_registry_change_empties_the_front_end_caches_too(rng: np.random.Generator) -> None:
    algoswap.ops.relu(rng.standard_normal(3))
    cache = algoswap.registry().selection_cache
    assert len(cache.ops) and len(cache)
    algoswap.reload_plugins()
    cache = algoswap.registry().selection_cache
    assert not len(cache.ops) and not len(cache) and not len(cache.torch)


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
    assert len(algoswap.registry().selection_cache.torch) == LIMIT


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
