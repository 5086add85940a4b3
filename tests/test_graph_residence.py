"""Parameters and optimizer variables updated in place in a device's memory live there between runs.

The device here is the test backend of boxed_backend.py (its own memory space, every move counted):
the optimizer's update runs on it, everything else on the host.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from boxed_backend import MOVES, register_boxed
from helpers import assert_close
from algoswap.testing._scales import update_scale


@pytest.fixture
def boxed() -> Iterator[None]:
    register_boxed([("momentum_update", "direct")])
    yield
    algoswap.reload_plugins()


def _model(rng: np.random.Generator) -> tuple[g.Node, g.Node, g.Node, list[g.Node], g.Node]:
    x, labels = g.placeholder("x", (8, 5), "float64"), g.placeholder("labels", (8,), "int64")
    w, b = g.parameter("w", rng.standard_normal((3, 5))), g.parameter("b", rng.standard_normal(3))
    loss = g.softmax_cross_entropy(g.linear(x, w, b), labels)
    return x, labels, loss, [w, b], g.Momentum(0.1).minimize(loss)


LOSS_TERMS = 8 * (3 + 5 + 1)


def _train(executor: g.Executor, x: g.Node, labels: g.Node, data: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    return [float(executor.run(feed={x: xv, labels: yv})[0]) for xv, yv in data]


def test_parameters_live_where_their_update_runs(boxed: None, rng: np.random.Generator) -> None:
    data = [(rng.standard_normal((8, 5)), rng.integers(0, 3, 8)) for _ in range(4)]
    seed = int(rng.integers(2**31))
    x, labels, loss, params, step = _model(np.random.default_rng(seed))
    on_box = g.Executor([loss, step], algorithms={"momentum_update": "boxed:default"})
    rx, rlabels, rloss, rparams, rstep = _model(np.random.default_rng(seed))
    reference = g.Executor([rloss, rstep], backends=["numpy"])

    MOVES.update(up=0, down=0)
    losses = _train(on_box, x, labels, data[:3])
    # w, b and their two velocities go up once; then each run uploads the two gradients
    assert MOVES["up"] == 4 + 2 * 3, MOVES
    plan = on_box.plan()
    updates = [s for s in plan.steps if s.op == "momentum_update"]
    assert updates and all(s.memory.name == "boxed" for s in updates)
    assert set(plan.kept.values()) == {on_box.homes()[id(params[0])]}
    assert "kept in boxed memory between runs" in str(on_box.explain())

    # the same float64 computations on either side: a loss sums 8 rows of 3 logits of 5 + 1 terms
    assert_close(losses, _train(reference, rx, rlabels, data[:3]), reduction_length=LOSS_TERMS)
    starts = [p.value for p in _model(np.random.default_rng(seed))[3]]
    for mine, theirs, start in zip(params, rparams, starts):  # reading a value brings the device copy home
        scale, length = update_scale(start, theirs.value, steps=3 * LOSS_TERMS)
        assert_close(mine.value, theirs.value, reduction_length=length, scale=scale, context=mine.name)
    MOVES.update(up=0, down=0)
    assert_close(_train(on_box, x, labels, data[3:]), _train(reference, rx, rlabels, data[3:]), reduction_length=LOSS_TERMS)
    assert MOVES["up"] == 2 + 2, MOVES  # w and b were read, so they went up again; the velocities were not


def test_setting_a_value_replaces_the_device_copy(boxed: None, rng: np.random.Generator) -> None:
    x, labels, loss, (w, b), step = _model(rng)
    on_box = g.Executor([loss, step], algorithms={"momentum_update": "boxed:default"})
    batch = (rng.standard_normal((8, 5)), rng.integers(0, 3, 8))
    _train(on_box, x, labels, [batch])
    w.value = np.zeros((3, 5))
    b.value = np.zeros(3)
    assert float(on_box.run("default", feed={x: batch[0], labels: batch[1]})[0]) == pytest.approx(np.log(3))
