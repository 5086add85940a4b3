"""The CUDA backend's reductions on 0-d arrays, run on the host with NumPy in CuPy's place (whose
``ascontiguousarray`` makes a 0-d array 1-d, as NumPy's does): a scalar's gradient stays a scalar."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cupy")
from algoswap_cuda import reduce  # noqa: E402


@pytest.fixture(autouse=True)
def numpy_as_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reduce, "cp", np)


def test_a_0d_array_stays_0d() -> None:
    x = np.array(2.5)
    results = {"sum_to_shape": reduce.sum_to_shape(x, shape=()), "broadcast_to": reduce.broadcast_to(x, shape=()),
               "reduce_sum_grad": reduce.reduce_sum_grad(x, axes=(), keepdims=False, input_size=()),
               "reduce_max_grad": reduce.reduce_max_grad(x, x, axes=(), keepdims=False)}
    assert {name: (value.shape, float(value)) for name, value in results.items()} == {
        "sum_to_shape": ((), 2.5), "broadcast_to": ((), 2.5), "reduce_sum_grad": ((), 2.5), "reduce_max_grad": ((), 2.5)}


def test_other_shapes_are_unchanged() -> None:
    x = np.arange(6.0).reshape(2, 3)
    assert np.array_equal(reduce.sum_to_shape(x, shape=(1, 3)), [[3.0, 5.0, 7.0]])
    assert np.array_equal(reduce.sum_to_shape(x, shape=()), 15.0) and reduce.sum_to_shape(x, shape=()).shape == ()
    assert reduce.broadcast_to(np.ones(3), shape=(2, 3)).flags.c_contiguous
