"""A node whose computed inputs are in host and device memory runs on the device: the host value moves
up, the activations stay. torchvision's ViT broadcasts its class token (a weight) on the host and joins
it to the patch embeddings on the GPU: before, the join ran on the host and pulled every later step
(247 of 251 on the H200) onto NumPy, 234 times eager's time."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from boxed_backend import MOVES, Box, register_boxed


@pytest.fixture
def boxed() -> Iterator[None]:
    register_boxed([("concat", "direct"), ("relu", "direct")])
    yield
    algoswap.reload_plugins()


def test_a_weight_derived_host_value_moves_to_the_activations_device(boxed: None, rng: np.random.Generator) -> None:
    token = g.constant(rng.standard_normal((1, 1, 4)).astype(np.float32), name="token")
    x = g.placeholder("x", (2, 3, 4))
    tokens = g.broadcast_to(token, shape=(2, 1, 4))  # host: its only input is a weight, and boxed has no broadcast_to
    out = g.relu(g.concat(tokens, x, axis=1))
    executor = g.Executor([out])
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    MOVES.update(up=0, down=0)
    got = executor.run(feed={x: Box(value)})[0]
    where = {step.op: step.backend for step in executor.last.steps if step.runner is not None}
    assert where == {"broadcast_to": "numpy", "concat": "boxed", "relu": "boxed"}, executor.explain()
    assert MOVES == {"up": 1, "down": 1}, MOVES  # the token up, the result down: the activations never left the box
    expected = np.maximum(np.concatenate([np.broadcast_to(token.value, (2, 1, 4)), value], axis=1), 0)
    assert np.array_equal(got, expected)  # copies and a relu: exact
