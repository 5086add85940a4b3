"""Graph building, autodiff (against finite differences in float64), optimizers and the data loader."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algoswap import graph as g
from helpers import assert_close, central_difference, fail
from algoswap.testing._scales import update_scale


def test_shapes_are_inferred_while_building() -> None:
    x = g.placeholder("x", (2, 3, 8, 8))
    w = g.parameter("w", np.zeros((4, 3, 3, 3), np.float32))
    y = g.op("conv2d", x, w, None, padding=1, stride=2)
    assert y.shape == (2, 4, 4, 4) and y.dtype == "float32"
    assert g.flatten(g.maxpool2d(y, kernel_size=2)).shape == (2, 16)


def test_a_mismatch_names_the_node_and_both_operands() -> None:
    a = g.placeholder("left", (3, 4))
    b = g.placeholder("right", (5,))
    with pytest.raises(g.GraphError) as info:
        g.add(a, b, name="sum")
    message = str(info.value)
    assert "'sum' (add)" in message and "left (3, 4)" in message and "right (5,)" in message


def test_unknown_ops_and_attributes_are_errors() -> None:
    x = g.placeholder("x", (2, 3))
    with pytest.raises(g.GraphError, match="no op named 'relu6'"):
        g.op("relu6", x)
    with pytest.raises(g.GraphError, match="no such attribute"):
        g.relu(x, slope=2)


# A bound on the rounding of one float64 evaluation of these tests' losses, relative to max(1, |loss|): each
# sums at most a few hundred terms of unit scale (inputs and parameters are standard normal draws), each
# computed with a relative error below 10u; 1e-12 is about 4500u.
LOSS_ROUNDING = 1e-12


def _fd_check(loss: g.Node, params: list[g.Node], feed: dict[Any, Any], rng: np.random.Generator) -> None:
    """Every param's gradient from the graph against central differences at a few random entries, within
    the central difference's error bound (``helpers.central_difference``)."""
    grads = g.gradients(loss, params)
    executor = g.Executor({"grad": [loss, *grads], "loss": [loss]}, backends=["numpy"])
    value, *analytic = executor.run("grad", feed)
    rounding = LOSS_ROUNDING * max(1.0, abs(float(value)))
    for param, grad in zip(params, analytic):
        assert grad.shape == param.shape
        flat = param.value.reshape(-1)
        for index in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            keep = flat[index]

            def moved(t: float) -> float:
                flat[index] = keep + t
                return float(executor.run("loss", feed)[0])

            numeric, bound = central_difference(moved, 1e-6, rounding)
            flat[index] = keep
            if not abs(grad.reshape(-1)[index] - numeric) <= bound:
                fail(f"d loss / d {param.name}[{index}]: graph {grad.reshape(-1)[index]!r}, finite difference {numeric!r}, "
                     f"bound {bound:.3g}")


def test_gradients_of_a_cnn_match_finite_differences(rng: np.random.Generator) -> None:
    x = g.placeholder("x", (2, 2, 6, 6), "float64")
    labels = g.placeholder("labels", (2,), "int64")
    w = g.parameter("w", rng.standard_normal((3, 2, 3, 3)))
    b = g.parameter("b", rng.standard_normal(3))
    fc = g.parameter("fc", rng.standard_normal((4, 27)))
    h = g.tanh(g.conv2d(x, w, b, padding=1))
    h = g.avgpool2d(h, kernel_size=2)
    h = h * h + h  # h used three times: the gradients add up
    logits = g.linear(g.flatten(h), fc)
    loss = g.softmax_cross_entropy(logits, labels)
    feed = {x: rng.standard_normal((2, 2, 6, 6)), labels: np.array([1, 3])}
    _fd_check(loss, [w, b, fc], feed, rng)


def test_gradients_through_broadcasting_matmul_and_reductions(rng: np.random.Generator) -> None:
    x = g.placeholder("x", (5, 3), "float64")
    w = g.parameter("w", rng.standard_normal((3, 4)))
    bias = g.parameter("bias", rng.standard_normal((1, 4)))
    scale = g.parameter("scale", rng.uniform(0.5, 1.5, 4))
    y = g.sigmoid((x @ w + bias) / scale)
    loss = g.reduce_sum(g.reduce_mean(y * y, axes=0)) - 0.5
    _fd_check(loss, [w, bias, scale], {x: rng.standard_normal((5, 3))}, rng)


def test_gradients_flow_through_each_input_of_a_concat(rng: np.random.Generator) -> None:
    """concat's variadic input: each array gets its own part of grad_output (a used twice gets both)."""
    a = g.parameter("a", rng.standard_normal((2, 3)))
    b = g.parameter("b", rng.standard_normal((4, 3)))
    joined = g.concat(a, b, a, axis=0, name="joined")
    loss = g.reduce_sum(g.sigmoid(joined) * g.sigmoid(joined))
    _fd_check(loss, [a, b], {}, rng)


def test_a_parameter_reaching_the_loss_through_an_op_without_gradient_rules_is_named() -> None:
    t = g.parameter("t", np.full((2, 3), 0.5, np.float32))
    x = g.constant(np.full((2, 3), 0.25, np.float32), name="x")
    loss = g.binary_cross_entropy(x, t, name="bce")
    with pytest.raises(g.GraphError, match=r"'bce' \(binary_cross_entropy\): no gradient rule for its input 'target'"):
        g.gradients(loss, [t])
    with pytest.raises(g.GraphError, match="does not depend on b"):
        g.gradients(g.reduce_sum(t), [g.parameter("b", np.ones(2, np.float32))])


def _quadratic(optimizer: g.Optimizer, start: np.ndarray, target: np.ndarray) -> tuple[g.Node, g.Executor]:
    w = g.parameter("w", start)
    diff = w - g.constant(target)
    loss = g.reduce_sum(diff * diff)
    return w, g.Executor([loss, optimizer.minimize(loss)], backends=["numpy"])


@pytest.mark.parametrize("name", ["SGD", "Momentum", "Nesterov", "AdaGrad", "Adam"])
def test_optimizers_follow_torch(name: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    start, target = rng.standard_normal(5), rng.standard_normal(5)
    ours = {"SGD": g.SGD(0.1), "Momentum": g.Momentum(0.1, 0.9), "Nesterov": g.Nesterov(0.1, 0.9),
            "AdaGrad": g.AdaGrad(0.1), "Adam": g.Adam(0.1)}[name]
    w, executor = _quadratic(ours, start, target)
    tw = torch.tensor(start, requires_grad=True)
    theirs = {"SGD": lambda: torch.optim.SGD([tw], 0.1), "Momentum": lambda: torch.optim.SGD([tw], 0.1, momentum=0.9),
              "Nesterov": lambda: torch.optim.SGD([tw], 0.1, momentum=0.9, nesterov=True),
              "AdaGrad": lambda: torch.optim.Adagrad([tw], 0.1), "Adam": lambda: torch.optim.Adam([tw], 0.1)}[name]()
    for _ in range(4):
        executor.run()
        theirs.zero_grad()
        ((tw - torch.from_numpy(target)) ** 2).sum().backward()
        theirs.step()
    scale, length = update_scale(start, tw, steps=4)
    assert_close(w.value, tw, reduction_length=length, scale=scale, context=name)


def test_an_embedding_table_gets_the_sparse_update(rng: np.random.Generator) -> None:
    table = rng.standard_normal((10, 4))
    weight = g.parameter("table", table)
    ids = g.placeholder("ids", (3,), "int64")
    loss = g.reduce_sum(g.embedding(weight, ids))
    train = g.SGD(0.5).minimize(loss)
    executor = g.Executor([loss, train], backends=["numpy"])
    assert [s.op for s in executor.plan().steps][-1] == "sgd_update_sparse"
    executor.run(feed={ids: np.array([1, 7, 1])})
    expected = table.copy()
    expected[1] -= 1.0  # looked up twice: the two rows of gradient add up
    expected[7] -= 0.5
    assert np.array_equal(weight.value, expected)


def test_the_data_loader_shuffles_with_its_seed_and_keeps_arrays_together() -> None:
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    first = g.DataLoader(x, y, batch_size=4, seed=3)
    second = g.DataLoader(x, y, batch_size=4, seed=3)
    batches = [first.next_batch() for _ in range(4)]
    assert len(first) == 2  # shuffled: the short last batch is dropped
    for (bx, by), (cx, cy) in zip(batches, (second.next_batch() for _ in range(4))):
        assert np.array_equal(bx, cx) and np.array_equal(bx[:, 0], 2 * by)
    epoch = np.concatenate([b[1] for b in batches[:2]])
    assert len(set(epoch.tolist())) == 8 and not np.array_equal(epoch, np.arange(8))
    ordered = g.DataLoader(x, y, batch_size=4, shuffle=False)
    assert len(ordered) == 3 and [len(ordered.next_batch()[1]) for _ in range(3)] == [4, 4, 2]
