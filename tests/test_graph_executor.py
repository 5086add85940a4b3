"""The executor: placement and transfers, memory planning, subgraphs, overrides, errors, training."""

from __future__ import annotations

import re
import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from boxed_backend import Box
from helpers import assert_close, network_terms


class Staged(Box):
    """An array of the 'staging' memory space: numpy data behind a type host implementations refuse."""


STAGING = algoswap.MemorySpace("staging", "test_graph_executor.Staged", to_host=lambda s: s.data,
                               from_host=lambda a: Staged(np.array(a)))


def _staged_relu(x: Staged) -> Staged:
    assert isinstance(x, Staged), "the executor must move inputs to the backend's memory"
    return Staged(np.maximum(x.data, 0))


def _staged_add(a: Staged, b: Staged) -> Staged:
    assert isinstance(a, Staged) and isinstance(b, Staged)
    return Staged(a.data + b.data)


@pytest.fixture
def staging() -> Iterator[str]:
    """A backend whose arrays live in their own memory space (ranked first for relu and add)."""

    def register(registry: Any) -> None:
        registry.add_backend("staging", device="stage", memory=STAGING, priority=100)
        registry.add_implementation("relu", "direct", "staging", _staged_relu)
        registry.add_implementation("add", "direct", "staging", _staged_add)

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    record = algoswap.register_plugin(plugin, name="staging")
    assert record.status == "loaded", record.error
    yield "staging"
    algoswap.reload_plugins()


def test_transfers_are_inserted_between_memory_spaces_and_shared_by_consumers(staging: str, rng: np.random.Generator) -> None:
    x = g.placeholder("x", (4, 6))
    w = g.parameter("w", rng.standard_normal((5, 6)).astype(np.float32))
    h = g.linear(x, w, name="fc")  # no staging implementation: host
    r = g.relu(h, name="act")  # staging
    out = g.add(r, g.sigmoid(h, name="gate"), name="mix")  # staging: the host sigmoid is moved there
    y = g.mul_scalar(out, value=2.0, name="twice")  # host again
    executor = g.Executor([y, r], backends=["staging", "numpy"])  # the same plan on machines with a GPU
    program = executor.plan()
    assert {s.name: s.backend for s in program.steps if not s.is_transfer}["act"] == "staging"
    assert [(s.name, s.note) for s in program.transfers] == [
        ("fc->staging", "host -> staging"), ("gate->staging", "host -> staging"), ("mix->host", "staging -> host"),
        ("act->host", "staging -> host"),
    ]
    xv = rng.standard_normal((4, 6)).astype(np.float32)
    got_y, got_r = executor.run(feed={x: xv})
    hv = xv @ w.value.T
    terms = np.abs(xv) @ np.abs(w.value.T)  # of each product's 6 terms (relu and sigmoid change no scale: 1)
    assert_close(got_r, np.maximum(hv, 0), reduction_length=6, scale=terms)
    assert_close(got_y, 2 * (np.maximum(hv, 0) + 1 / (1 + np.exp(-hv))), reduction_length=6, scale=2 * (terms + 1), layers=4)
    text = executor.explain()
    assert re.search(r"fc->staging +transfer +host -> staging", text) and "staging:direct" in text and "4 transfers" in text


def test_every_node_reports_backend_algorithm_device_shape_and_bytes() -> None:
    x = g.placeholder("x", (2, 3, 8, 8))
    w = g.parameter("w", np.ones((4, 3, 3, 3), np.float32))
    y = g.relu(g.conv2d(x, w, None, padding=1, name="conv"), name="act")
    executor = g.Executor([y], algorithms={"conv2d": "numpy:smm"})
    text = executor.explain()
    assert "no transfers" in text or "transfers: none" in text
    line = next(line for line in text.splitlines() if line.startswith("conv "))
    assert "numpy:smm" in line and "cpu" in line and "(2, 4, 8, 8)" in line and f"{2 * 4 * 8 * 8 * 4:,}" in line


def test_overrides_by_node_name_win_over_op_name_and_bad_requests_are_refused() -> None:
    x = g.placeholder("x", (1, 2, 6, 6))
    w = g.parameter("w", np.ones((2, 2, 3, 3), np.float32))
    a = g.conv2d(x, w, None, name="first")
    b = g.conv2d(a, w, None, name="second")
    executor = g.Executor([b], algorithms={"conv2d": "numpy:smm", "second": "numpy:direct"})
    chosen = {s.name: s.algorithm for s in executor.plan().steps}
    assert chosen == {"first": "smm", "second": "direct"}
    with pytest.raises(algoswap.SelectorError, match="node 'first' .*no implementation named 'numpy:winograd_x'"):
        g.Executor([b], algorithms={"conv2d": "numpy:winograd_x"})
    with pytest.raises(algoswap.SelectorError, match=r"no op or node named 'thrid' \(ops: conv2d; nodes: first, second\)"):
        g.Executor([b], algorithms={"thrid": "numpy:smm"})


def test_buffers_are_freed_after_their_last_reader_and_never_before(rng: np.random.Generator) -> None:
    x = g.placeholder("x", (8, 16))
    nodes = [x]
    for index in range(6):  # each value read by the next two nodes: frees must wait for the second
        previous = nodes[-2] if len(nodes) > 1 else x
        nodes.append(g.tanh(g.add(nodes[-1], previous), name=f"t{index}"))
    planned, kept = g.Executor([nodes[-1], nodes[2]]), g.Executor([nodes[-1], nodes[2]], plan_memory=False)
    program = planned.plan()
    freed_at = {slot: i for i, step in enumerate(program.steps) for slot in step.free}
    for index, step in enumerate(program.steps):
        for slot in step.inputs:
            assert slot is None or freed_at.get(slot, index) >= index, f"{step.name} reads a freed value"
    assert program.output_slots[1] not in freed_at  # an output is kept to the end
    feed = {x: rng.standard_normal((8, 16)).astype(np.float32)}
    for got, want in zip(planned.run(feed=feed), kept.run(feed=feed)):
        assert np.array_equal(got, want)
    assert planned.memory().peak_bytes < kept.memory().peak_bytes == kept.memory().keep_all_bytes


def test_in_place_updates_run_after_every_reader_of_the_parameter(rng: np.random.Generator) -> None:
    x = g.placeholder("x", (3, 4))
    w = g.parameter("w", rng.standard_normal((2, 4)).astype(np.float32))
    before = w.value.copy()
    reads_w = g.mul_scalar(w, value=1.0, name="copy_of_w")  # needed by nothing the update waits for
    loss = g.reduce_sum(g.linear(x, w))
    executor = g.Executor([reads_w, g.SGD(1.0).minimize(loss), loss])
    order = [s.name for s in executor.plan().steps]
    assert order.index("copy_of_w") < order.index("update_w")
    got, _, _ = executor.run(feed={x: np.ones((3, 4), np.float32)})
    assert np.array_equal(got, before) and not np.array_equal(w.value, before)


def test_subgraphs_share_nodes_and_parameters(rng: np.random.Generator) -> None:
    x = g.placeholder("x", (6, 3))
    y = g.placeholder("y", (6,), "int64")
    w = g.parameter("w", rng.standard_normal((4, 3)).astype(np.float32))
    logits = g.linear(x, w)
    loss = g.softmax_cross_entropy(logits, y)
    executor = g.Executor({"train": [loss, g.SGD(0.5).minimize(loss)], "validate": [loss, logits]})
    feed = {"x": rng.standard_normal((6, 3)).astype(np.float32), "y": rng.integers(0, 4, 6)}
    first = float(executor.run("validate", feed)[0])
    for _ in range(5):
        executor.run("train", feed)
    assert float(executor.run("validate", feed)[0]) < first
    assert len(executor.plan("validate").steps) < len(executor.plan("train").steps)
    with pytest.raises(g.GraphError, match="no subgraph named 'test'"):
        executor.run("test", feed)


def test_run_time_errors_name_the_node_and_its_op() -> None:
    table = g.parameter("table", np.zeros((5, 2), np.float32))
    ids = g.placeholder("ids", (3,), "int64")
    executor = g.Executor([g.embedding(table, ids, name="lookup")])
    with pytest.raises(g.GraphError, match=r"node 'lookup' \(op embedding, numpy:direct\) failed"):
        executor.run(feed={ids: np.array([0, 9, 1])})
    with pytest.raises(g.GraphError, match="placeholder 'ids' .* was not fed"):
        executor.run()
    with pytest.raises(g.GraphError, match="fed dtype float32; expected int64"):
        executor.run(feed={ids: np.zeros(3, np.float32)})


def test_a_short_training_run_learns_digits_and_numpy_and_onednn_losses_agree() -> None:
    pytest.importorskip("sklearn", reason="make test installs scikit-learn")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import train_digits

    data = train_digits.load(0)
    small = (data[0][:640], data[1], data[2][:640], data[3])
    losses, accuracy = train_digits.train_executor(small, 2, 0, ["numpy"])
    assert accuracy > 0.8 and np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    if algoswap.registry().backends.get("dnnl") is not None:
        short = (data[0][:96], data[1], data[2][:96], data[3])
        numpy_losses, _ = train_digits.train_executor(short, 1, 0, ["numpy"])
        dnnl_losses, _ = train_digits.train_executor(short, 1, 0, ["dnnl", "numpy"])
        assert len(dnnl_losses) == 3
        assert_close(dnnl_losses, numpy_losses, dtype="float32", ref_dtype="float32",  # Python floats of float32 losses
                     **network_terms(train_digits.torch_network(0), (32, 1, 8, 8), steps=3))


def test_a_torch_model_imports_into_a_graph_runs_and_trains(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model = zoo.build("convnet")
    imported = g.from_torch(model, (2, 3, 32, 32))
    xv = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    executor = g.Executor([imported.output])
    with torch.no_grad():
        assert_close(executor.run(feed={imported.inputs[0]: xv})[0], model(torch.from_numpy(xv)), **network_terms(model))
    labels = g.placeholder("labels", (2,), "int64")
    loss = g.softmax_cross_entropy(imported.output, labels)
    trainer = g.Executor([loss, g.SGD(0.01).minimize(loss)])
    feed = {imported.inputs[0]: xv, labels: np.array([1, 2])}
    first = float(trainer.run(feed=feed)[0])
    assert float(trainer.run(feed=feed)[0]) < first


@pytest.mark.parametrize("name", ["convnet", "squeezenet", "mobilenet"])
def test_inference_of_zoo_models_peaks_at_half_of_keeping_every_value(name: str) -> None:
    pytest.importorskip("torch")
    from algoswap import zoo

    imported = g.from_torch(zoo.build(name), zoo.input_shape(name, 1, small=True))
    report = g.Executor([imported.output]).memory()
    assert report.ratio <= 0.5, str(report)


def _small_cnn(weights: dict[str, np.ndarray], batch: int) -> tuple[g.Node, g.Node, g.Node]:
    x = g.placeholder("x", (batch, 3, 16, 16))
    labels = g.placeholder("labels", (batch,), "int64")
    p = {k: g.parameter(k, v) for k, v in weights.items()}
    h = g.maxpool2d(g.relu(g.conv2d(x, p["w1"], p["b1"], padding=1)), kernel_size=2)
    h = g.maxpool2d(g.relu(g.conv2d(h, p["w2"], p["b2"], padding=1)), kernel_size=2)
    loss = g.softmax_cross_entropy(g.linear(g.flatten(h), p["fc"], p["fcb"]), labels)
    return x, labels, loss


def test_on_a_gpu_nodes_run_in_device_memory_with_transfers_and_train_like_numpy(rng: np.random.Generator) -> None:
    cuda = algoswap.registry().backends.get("cuda")
    if cuda is None or cuda.availability() is not True:
        pytest.skip(f"needs the CUDA backend and a GPU: {'not installed' if cuda is None else cuda.availability()}")
    weights = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
               "w2": rng.standard_normal((16, 8, 3, 3)) * 0.1, "b2": rng.standard_normal(16) * 0.1,
               "fc": rng.standard_normal((10, 256)) * 0.05, "fcb": np.zeros(10)}
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    xv, yv = rng.standard_normal((16, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 16)
    losses, params = {}, {}
    for label, backends in (("gpu", ["cuda"]), ("numpy", ["numpy"])):  # host data goes to the GPU when asked
        x, labels, loss = _small_cnn(weights, 16)
        executor = g.Executor([loss, g.Momentum(0.05).minimize(loss)], backends=backends)
        losses[label] = [float(executor.run(feed={x: xv, labels: yv})[0]) for _ in range(4)]
        params[label] = np.concatenate([p.value.ravel() for p in g.parameters_of([loss])])
        if label == "gpu":
            program = executor.plan()
            ran = {s.backend for s in program.steps if not s.is_transfer}
            assert ran == {"cuda"}, ran  # every op, the loss and the updates included, has a CUDA implementation
            kept = sorted(node.name for slot, node in program.sources if slot in program.kept)
            assert kept == sorted([*weights, *(f"{k}_velocity" for k in weights)])  # they stay on the GPU between steps
            assert {s.note for s in program.transfers} == {"host -> cuda", "cuda -> host"}
            assert len(program.transfers) == 3, [s.name for s in program.transfers]  # x and labels in, the loss out
    assert losses["gpu"][-1] < losses["gpu"][0]
    # 4 steps of 8 ops (convolutions 28 and 73 terms, linear 257; weight gradients over 16*16*16 pixels at most),
    # summed: an upper bound of network_terms' quadrature
    terms = {"layers": 4 * 8, "reduction_length": 4 * (28 + 73 + 257 + 3 * 16 * 16 * 16)}
    assert_close(losses["gpu"], losses["numpy"], dtype="tfloat32", ref_dtype="float32", **terms)  # TF32 may be on
    assert_close(params["gpu"], params["numpy"], dtype="tfloat32", **terms)  # read back from the GPU through Node.value
