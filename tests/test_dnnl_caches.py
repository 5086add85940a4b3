"""The oneDNN backend's caches: plans, packed weights and output buffers.

Every cache is an algoswap.LRUCache of a declared kind (or, for the extension's plans, bounded by
one); data derived from a weight is kept only for frozen weights (algoswap.freeze), and input
shapes whose primitives read the weight in one layout share one packed copy. Tests count entries,
never bytes of memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from helpers import relative_error

algoswap_dnnl = pytest.importorskip("algoswap_dnnl", reason="algoswap-dnnl is not installed")

_available = algoswap.registry().backends["dnnl"].availability() if "dnnl" in algoswap.registry().backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"dnnl backend unavailable: {_available}")

CONV = {"stride": [1, 1], "padding_l": [1, 1], "padding_r": [1, 1], "dilation": [1, 1], "groups": 1}
DNNL_KINDS = ("dnnl_plans", "dnnl_conv_calls", "dnnl_packed_weights", "dnnl_finite_weights")


def ext() -> Any:
    from algoswap_dnnl._ext import dnnl

    return dnnl


def _conv_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    from algoswap_dnnl import conv

    return conv.conv2d_direct(x, w, b, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1,
                              padding_mode="zeros")


@pytest.fixture
def blocked_weights() -> Iterator[Any]:
    """oneDNN's blocked layouts forced (its weights are reordered: there is something to cache); the
    packed-weight caches empty before and after."""
    import algoswap_dnnl
    from algoswap_dnnl import conv

    algoswap_dnnl.set_layout("any")
    conv.packed_weights_clear()
    try:
        yield conv
    finally:
        conv.packed_weights_clear()
        algoswap_dnnl.set_layout(None)


def test_every_cache_is_a_declared_kind_with_its_default_documented() -> None:
    from algoswap_dnnl import conv  # noqa: F401 - declares the conv2d kinds

    limits = algoswap.cache_limits()
    for name in DNNL_KINDS:
        assert name in limits and limits[name].doc.startswith("oneDNN"), name
    assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in limits["dnnl_plans"].doc


def test_primitives_are_cached_per_shape() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    ext().cache_clear()
    ext().conv2d_forward(rng.standard_normal((1, 4, 9, 9), dtype=np.float32), w, None, None, **CONV)
    size = ext().cache_size()
    assert size == 1
    ext().conv2d_forward(rng.standard_normal((1, 4, 9, 9), dtype=np.float32), w, None, None, **CONV)
    assert ext().cache_size() == size
    ext().conv2d_forward(rng.standard_normal((2, 4, 9, 9), dtype=np.float32), w, None, None, **CONV)
    assert ext().cache_size() == size + 1


def test_the_plan_cache_follows_set_cache_limit(cache_limit: Any) -> None:
    cache_limit("dnnl_plans", 3)
    ext().cache_clear()
    for size in range(1, 11):
        ext().relu(np.ones(size, np.float32))
    assert ext().cache_size() == 3  # the three most recent; the others dropped
    cache_limit("dnnl_plans", 0)
    np.testing.assert_array_equal(ext().relu(np.full(4, -1.0, np.float32)), np.zeros(4, np.float32))  # runs uncached
    assert ext().cache_size() == 0


PLAN_LIMIT_FROM_ENVIRONMENT = """
import numpy as np
from algoswap_dnnl._ext import dnnl
for size in range(1, 20):
    dnnl.relu(np.ones(size, np.float32))
print(dnnl.cache_size())
"""


def test_the_plan_cache_limit_comes_from_the_environment() -> None:
    env = {**os.environ, "ALGOSWAP_CACHE_DNNL_PLANS": "5"}
    done = subprocess.run([sys.executable, "-c", PLAN_LIMIT_FROM_ENVIRONMENT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "5", (done.returncode, done.stdout, done.stderr[-2000:])


def test_frozen_weights_are_reordered_once(blocked_weights: Any) -> None:
    conv = blocked_weights
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 32, 14, 14), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    expected = _conv_direct(x, w, b)
    assert conv.packed_weights_count() == 0  # writeable: never cached
    constant = algoswap.freeze(w)
    for _ in range(3):
        np.testing.assert_array_equal(_conv_direct(x, constant, b), expected)
    assert conv.packed_weights_count() == 1
    info = ext().conv2d_forward_impl(list(x.shape), list(w.shape), True, False, **CONV, layout="any")
    assert info.layout == "blocked"
    packed = ext().conv2d_pack_weights(list(x.shape), constant, True, False, **CONV, layout="any")
    assert packed is not None and packed.shape == list(w.shape)


def test_a_call_signature_derives_the_primitives_arguments_once(blocked_weights: Any) -> None:
    """The geometry, the primitive's arguments and its weights' layout are made at a signature's first call."""
    conv = blocked_weights
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
    w = algoswap.freeze(rng.standard_normal((16, 16, 3, 3), dtype=np.float32))
    for _ in range(3):
        _conv_direct(x, w)
    assert conv.conv_calls_count() == 1
    _conv_direct(x[:, :, :8], w)  # another input shape: another signature
    assert conv.conv_calls_count() == 2


def test_a_layout_set_between_calls_applies_to_the_next_call(blocked_weights: Any) -> None:
    """The layout setting is part of a call signature: a kept signature never serves another layout."""
    import algoswap_dnnl

    conv = blocked_weights
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 32, 14, 14), dtype=np.float32)
    w = algoswap.freeze(rng.standard_normal((64, 32, 3, 3), dtype=np.float32))
    algoswap_dnnl.set_layout("plain")
    expected = _conv_direct(x, w)
    assert conv.packed_weights_count() == 0  # the plain primitive reads the weight as it is
    algoswap_dnnl.set_layout("any")
    np.testing.assert_allclose(_conv_direct(x, w), expected, rtol=1e-5, atol=1e-5)
    assert conv.packed_weights_count() == 1  # the blocked one reads a packed copy


def test_writeable_weights_are_never_cached(blocked_weights: Any) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
    w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
    first = _conv_direct(x, w)
    w *= 2  # changed in place between calls (training): the next call must see it
    np.testing.assert_allclose(_conv_direct(x, w), 2 * first, rtol=1e-5, atol=1e-5)
    assert blocked_weights.packed_weights_count() == 0


def test_a_read_only_view_of_a_changing_array_is_never_cached(blocked_weights: Any) -> None:
    """Issue 12, defect 2: a read-only view sees every write to its base; its packed copy went stale."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
    base = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
    w = base.view()
    w.setflags(write=False)
    first = algoswap.ops.conv2d(x, w, None, padding=1, algorithm="dnnl:direct")
    base *= 2
    second = algoswap.ops.conv2d(x, w, None, padding=1, algorithm="dnnl:direct")
    assert relative_error(second, 2 * first) <= 1e-6
    assert blocked_weights.packed_weights_count() == 0


def test_a_dead_weight_never_serves_a_new_one(blocked_weights: Any) -> None:
    import gc

    conv = blocked_weights
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
    for round in range(20):  # same shape each time: the allocator often hands back the same address
        values = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
        w = algoswap.freeze(values)
        got = _conv_direct(x, w)
        np.testing.assert_array_equal(got, _conv_direct(x, values))
        assert conv.packed_weights_count() == 1, round
        del w
        gc.collect()
        assert conv.packed_weights_count() == 0, round  # dropped when the weight died


def test_input_shapes_whose_primitives_read_one_layout_share_one_packed_weight(blocked_weights: Any) -> None:
    """Issue 12, defect 4: one copy per input shape made memory grow with every new shape."""
    conv = blocked_weights
    rng = np.random.default_rng(5)
    w = algoswap.freeze(rng.standard_normal((32, 32, 3, 3), dtype=np.float32))
    sizes = [(n, 32, h, h + 1) for n in (1, 2) for h in range(6, 16)]
    layouts = set()
    for size in sizes:
        x = rng.standard_normal(size, dtype=np.float32)
        np.testing.assert_array_equal(_conv_direct(x, w), _conv_direct(x, np.array(w)))
        layouts.add(ext().conv2d_weights_layout(list(size), list(w.shape), False, False, **CONV, layout="any"))
    assert "" not in layouts  # every primitive reads a packed layout
    assert conv.packed_weights_count() == len(layouts) < len(sizes)


def test_packed_weights_are_bounded_by_their_cache_kind(blocked_weights: Any, cache_limit: Any) -> None:
    conv = blocked_weights
    cache_limit("dnnl_packed_weights", 2)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
    weights = [algoswap.freeze(rng.standard_normal((16, 16, 3, 3), dtype=np.float32)) for _ in range(5)]
    for w in weights + weights:
        np.testing.assert_array_equal(_conv_direct(x, w), _conv_direct(x, np.array(w)))
        assert conv.packed_weights_count() <= 2


def _frozen_weights(model: Any) -> Any:
    """swap_backend's Model with its weights frozen (until swap_backend freezes them itself: then this
    does nothing)."""
    assert all(algoswap.is_frozen(array) for array in model.constants.values())
    return model


def test_swap_backend_reorders_its_constant_weights_once() -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo
    from algoswap_dnnl import conv

    conv.packed_weights_clear()
    model, x = zoo.build("resnet18"), zoo.sample_input("resnet18", 1, small=True)
    converted = _frozen_weights(algoswap.swap_backend(model, sample_input_shape=tuple(x.shape)))
    with torch.no_grad():
        expected = model(x)
        first = converted(x)
        count = conv.packed_weights_count()
        second = converted(x)
    assert relative_error(first, expected) <= 1e-4
    assert relative_error(second, expected) <= 1e-4
    assert count > 0 and conv.packed_weights_count() == count  # the second call reused every entry


def test_large_outputs_reuse_pooled_buffers() -> None:
    x = np.full((1, 64, 64, 64), -1.0, np.float32)  # 1 MiB: pooled
    first = ext().relu(x)
    address = first.ctypes.data
    del first  # its buffer goes back to the pool, not to the system
    assert ext().pooled_idle_bytes() >= x.nbytes
    second = ext().relu(-x)
    third = ext().relu(x)  # while the second lives: another buffer
    assert second.ctypes.data == address and third.ctypes.data != address
    np.testing.assert_array_equal(second, -x)
    np.testing.assert_array_equal(third, np.zeros_like(x))
    assert second.flags.writeable and second.flags.c_contiguous
