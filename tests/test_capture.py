"""Programs captured as device graphs and replayed (graph._capture), through a test backend whose memory
space captures: its ``capture`` records which input shapes it captured, runs the steps once while
"recording" (kernels that read a value back to the host fail then, as on a GPU) and replays by running
them again. The CUDA graphs themselves are tested on a GPU in test_cuda_graphs.py."""

from __future__ import annotations

import pickle
import types
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from algoswap.graph._capture import WARMING
from algoswap.graph._plan import PlanOptions
from boxed_backend import RECORDING, Box, register_boxed

torch = pytest.importorskip("torch")


class Recorder:
    """The boxed memory space's ``capture``."""

    def __init__(self) -> None:
        self.captured: list[tuple[tuple[int, ...], ...]] = []
        self.replays = 0
        self.stale = ""

    def __call__(self, run: Callable[[Sequence[Any]], list[Any]], inputs: Sequence[Any]) -> Any:
        self.captured.append(tuple(x.shape for x in inputs))
        RECORDING["on"] = True
        try:
            run([Box(x.data.copy()) for x in inputs])  # recorded on buffers of its own, as CUDA's capture does
        finally:
            RECORDING["on"] = False

        def replay(fed: Sequence[Any]) -> list[Any]:
            self.replays += 1
            return run(fed)

        replay.stale = lambda: self.stale  # type: ignore[attr-defined]
        return replay


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recording = Recorder()
    register_boxed([("linear", "gemm"), ("relu", "direct"), ("add", "direct")], capture=recording)
    yield recording
    RECORDING.update(on=False, host_reads=set())
    algoswap.reload_plugins()


def _program(capture: bool | None = True) -> tuple[g.Executor, g.Node, Callable[[np.ndarray], np.ndarray]]:
    x = g.placeholder("x", (1, 3))  # fed other batch sizes too
    w = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 10, name="w")
    w.host = algoswap.freeze(w.host)  # as a Model's weights: uploaded once, when planning
    out = g.relu(g.linear(x, w))
    executor = g.Executor([out], options=PlanOptions(outputs_home=False), capture=capture)  # as a Model's
    return executor, x, lambda v: np.maximum(v @ w.value.T, 0)


def _modes(executor: g.Executor, x: g.Node, values: Sequence[np.ndarray], expected: Callable[[np.ndarray], np.ndarray]) -> list[str]:
    modes = []
    for value in values:
        got = executor.run(feed={x: Box(value)})[0]
        np.testing.assert_allclose(got.data, expected(value), rtol=1e-6)
        modes.append(executor.captures.last.mode)
    return modes


def test_the_first_call_warms_up_the_second_captures_and_later_ones_replay(recorder: Recorder, rng: np.random.Generator) -> None:
    executor, x, expected = _program()
    values = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(4)]
    assert _modes(executor, x, values, expected) == ["eager", "capture", "replay", "replay"]
    assert recorder.captured == [((4, 3),)] and recorder.replays == 3


def test_a_new_input_shape_captures_again_and_each_shape_keeps_its_graph(recorder: Recorder, rng: np.random.Generator) -> None:
    executor, x, expected = _program()
    shapes = [(2, 3), (2, 3), (5, 3), (5, 3), (2, 3), (5, 3)]
    values = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    assert _modes(executor, x, values, expected) == ["eager", "capture", "eager", "capture", "replay", "replay"]
    assert recorder.captured == [((2, 3),), ((5, 3),)]


def test_at_most_graph_captures_programs_are_kept(recorder: Recorder, rng: np.random.Generator) -> None:
    limit = algoswap.cache_limits()["graph_captures"].size
    algoswap.set_cache_limit("graph_captures", 2)
    try:
        executor, x, expected = _program()
        for rows in (1, 2, 3):
            _modes(executor, x, [rng.standard_normal((rows, 3)).astype(np.float32)] * 2, expected)
        assert len(executor.captures) == 2
        again = _modes(executor, x, [rng.standard_normal((1, 3)).astype(np.float32)] * 2, expected)
    finally:
        algoswap.set_cache_limit("graph_captures", limit)
    assert again == ["eager", "capture"]  # the least recently used was dropped: warmed up and captured again
    assert [shape[0][0] for shape in recorder.captured] == [1, 2, 3, 1]


def test_the_switch_and_the_environment_variable_turn_capture_off(recorder: Recorder, rng: np.random.Generator,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    values = [rng.standard_normal((2, 3)).astype(np.float32)] * 3
    executor, x, expected = _program(capture=False)
    assert _modes(executor, x, values, expected) == ["eager"] * 3
    assert "capture is off (Executor(capture=False)" in str(executor.captures.last)
    monkeypatch.setenv("ALGOSWAP_CAPTURE", "0")
    following, x, expected = _program(capture=None)
    assert _modes(following, x, values, expected) == ["eager"] * 3 and "ALGOSWAP_CAPTURE=0" in str(following.captures.last)
    monkeypatch.delenv("ALGOSWAP_CAPTURE")
    assert _modes(following, x, values, expected) == ["eager", "capture", "replay"]
    following.captures.enabled = False  # drops the captured graphs
    assert len(following.captures) == 0 and recorder.captured == [((2, 3),)]
    with pytest.raises(TypeError, match="True, False or None"):
        following.captures.enabled = "yes"  # type: ignore[assignment]


def test_a_capture_that_fails_leaves_those_inputs_eager_with_the_reason(recorder: Recorder, rng: np.random.Generator) -> None:
    RECORDING["host_reads"] = {"relu"}
    executor, x, expected = _program()
    values = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    assert _modes(executor, x, values, expected) == ["eager"] * 4
    assert len(recorder.captured) == 1  # tried once, not at every call
    reason = executor.captures.last.reason
    assert reason.startswith("capture failed") and "relu reads a value back to the host" in reason, reason


def test_a_graph_that_no_longer_applies_is_captured_again(recorder: Recorder, rng: np.random.Generator) -> None:
    executor, x, expected = _program()
    values = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(5)]
    assert _modes(executor, x, values[:3], expected) == ["eager", "capture", "replay"]
    recorder.stale = "TF32 was switched on"
    assert _modes(executor, x, values[3:4], expected) == ["eager"]
    assert "no longer applies (TF32 was switched on)" in executor.captures.last.reason
    recorder.stale = ""
    assert _modes(executor, x, values[4:], expected) == ["capture"]


def test_inputs_in_host_memory_and_host_steps_are_not_captured(recorder: Recorder, rng: np.random.Generator) -> None:
    x = g.placeholder("x", (2, 3))
    uploaded = g.Executor([g.relu(x, algorithm="boxed:direct")], options=PlanOptions(outputs_home=False), capture=True)
    for _ in range(3):
        uploaded.run(feed={x: rng.standard_normal((2, 3)).astype(np.float32)})
    assert uploaded.captures.last.mode == "eager"
    assert "input 'x' arrives in another memory space and moves to boxed at every call" in uploaded.captures.last.reason
    on_host = g.Executor([g.relu(x)], capture=True)
    for _ in range(2):
        on_host.run(feed={x: rng.standard_normal((2, 3)).astype(np.float32)})
    assert on_host.captures.last.reason.startswith("it runs in host memory")


def _mlp() -> Any:
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()


def test_a_model_replays_and_explain_says_so(recorder: Recorder, rng: np.random.Generator) -> None:
    module = _mlp()
    model = algoswap.swap_backend(module)
    assert model.capture is None  # follows ALGOSWAP_CAPTURE: on
    for _ in range(3):
        value = rng.standard_normal((5, 3)).astype(np.float32)
        out = model.run(Box(value))
        with torch.no_grad():
            np.testing.assert_allclose(out.data, module(torch.from_numpy(value)).numpy(), rtol=1e-5, atol=1e-6)
    explanation = model.explain()
    assert explanation.capture.startswith("replayed the boxed graph") and "graph capture: replayed" in str(explanation)
    model.capture = False
    model.run(Box(value))
    assert "capture is off" in model.explain().capture and recorder.replays == 2
    restored = pickle.loads(pickle.dumps(model))
    assert restored.capture is False and restored.executor.captures.enabled is False


def test_a_model_with_a_step_in_pytorch_is_not_captured(recorder: Recorder, rng: np.random.Generator) -> None:
    model = algoswap.swap_backend(_mlp(), {"relu": "torch"})
    for _ in range(2):
        model.run(Box(rng.standard_normal((5, 3)).astype(np.float32)))
    assert recorder.captured == []
    assert model.explain().capture == "eager: node '_1' runs in PyTorch"


def test_a_model_called_with_host_tensors_runs_eagerly_and_says_why(recorder: Recorder) -> None:
    model = algoswap.swap_backend(_mlp())
    model(torch.ones(2, 3))
    assert model.explain().capture.startswith("eager: it runs in host memory")


def test_a_capture_reference_is_checked_when_the_backend_is_declared() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("odd", memory=algoswap.MemorySpace("odd", "Odd", capture="not a reference"))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    try:
        record = algoswap.register_plugin(plugin, name="odd")
        assert record.status == "broken" and "memory.capture" in record.error, record.error
    finally:
        algoswap.reload_plugins()



def test_swap_backend_takes_the_capture_switch() -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()).eval()
    assert algoswap.swap_backend(module).capture is None  # ALGOSWAP_CAPTURE decides
    off = algoswap.swap_backend(module, capture=False)
    assert off.capture is False and off.executor.captures.enabled is False


def test_a_value_computed_from_weights_alone_is_planned_once_and_the_program_captures(rng: np.random.Generator) -> None:
    """ViT's class token broadcast over the batch (``expand(n, -1, -1)`` of a weight, n from the input): computed
    when planning and uploaded once, as weights are; run at each call it was a host step and a transfer, which kept
    the whole device program eager (torchvision's vit_b_16 on the H200: graphs on 17.1 ms, off 16.8)."""
    recording = Recorder()
    register_boxed([("concat", "direct"), ("linear", "gemm"), ("broadcast_to", "direct")], capture=recording)
    try:
        token = g.constant(rng.standard_normal((1, 1, 3)).astype(np.float32), name="token")
        w = g.constant(rng.standard_normal((2, 3)).astype(np.float32), name="w")
        token.host, w.host = algoswap.freeze(token.host), algoswap.freeze(w.host)  # as a Model's weights
        x = g.placeholder("x", (2, 4, 3))
        out = g.linear(g.concat(g.broadcast_to(token, shape=(2, 1, 3)), x, axis=1), w)
        executor = g.Executor([out], options=PlanOptions(outputs_home=False), capture=True)
        values = [rng.standard_normal((2, 4, 3)).astype(np.float32) for _ in range(3)]
        expected = [np.concatenate([np.broadcast_to(token.value, (2, 1, 3)), v], axis=1) @ w.value.T for v in values]
        modes = _modes(executor, x, values, lambda v: expected[[id(e) for e in values].index(id(v))])
        assert modes == ["eager", "capture", "replay"], executor.captures.last
    finally:
        RECORDING.update(on=False, host_reads=set())
        algoswap.reload_plugins()
    program = executor.last
    assert [step.op for step in program.steps] == ["concat", "linear"] and not program.transfers
    assert [(step.op, step.backend) for step in program.planned] == [("broadcast_to", "numpy")]
    name = program.planned[0].name
    assert f"computed once, when planning, from weights alone: {name} (broadcast_to, numpy:direct)" in executor.explain()
