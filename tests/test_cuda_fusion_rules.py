"""How the CUDA backend chooses between a fused cuDNN graph and the plain convolution plus our epilogue pass
(algoswap_cuda._fusion), and what the fused graph's pointwise tail computes (algoswap_cuda._pointwise), without a
GPU: the cuDNN frontend is a stub here, plans are fakes with given timings, and the graph's pointwise nodes are
evaluated by NumPy (relu's clips dropping NaN, as fmax and fmin do). tests/test_cuda_nhwc.py runs them on cuDNN.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pytest

pytest.importorskip("cupy", reason="the CUDA backend's modules import CuPy")

_MODULES = ("algoswap_cuda._pointwise", "algoswap_cuda._cudnn", "algoswap_cuda._fusion")


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """_pointwise, _cudnn and _fusion imported against a stub cuDNN frontend; the modules (and the package's
    attributes) as they were are restored after."""
    import algoswap_cuda

    stub = types.ModuleType("cudnn")
    stub.scalar_type = types.SimpleNamespace(RUNTIME_PARAM="runtime")  # type: ignore[attr-defined]
    stub.backend_version = lambda: 91900  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cudnn", stub)
    saved = {name: (sys.modules.pop(name, None), getattr(algoswap_cuda, name.rpartition(".")[2], None)) for name in _MODULES}
    try:
        loaded = [importlib.import_module(name) for name in _MODULES]
        yield types.SimpleNamespace(pointwise=loaded[0], cudnn=loaded[1], fusion=loaded[2])
    finally:
        for name, (module, attribute) in saved.items():
            short = name.rpartition(".")[2]
            sys.modules.pop(name, None)
            if module is not None:
                sys.modules[name] = module
            if attribute is not None:
                setattr(algoswap_cuda, short, attribute)
            elif hasattr(algoswap_cuda, short):
                delattr(algoswap_cuda, short)


class NumpyGraph:
    """The frontend's pointwise methods, computed by NumPy in float32."""

    def tensor_scalar(self, value: float, scalar_type: Any) -> Any:
        return np.float32(value)

    def tensor(self, name: str, dim: list[int], stride: list[int], data_type: Any) -> Any:
        return self.inputs[name]

    def bias(self, input: Any, bias: Any, compute_data_type: Any) -> Any:
        return input + bias

    def add(self, a: Any, b: Any, compute_data_type: Any) -> Any:
        return a + b

    def mul(self, a: Any, b: Any, compute_data_type: Any) -> Any:
        return a * b

    def div(self, a: Any, b: Any, compute_data_type: Any) -> Any:
        return a / b

    def relu(self, input: Any, compute_data_type: Any, lower_clip: float = 0.0, upper_clip: float = np.inf) -> Any:
        return np.fmin(np.fmax(input, np.float32(lower_clip)), np.float32(upper_clip))

    def __init__(self, **inputs: Any) -> None:
        self.inputs = inputs


def test_the_graph_computes_hardswish_as_the_epilogue_does(modules: Any) -> None:
    """bias, residual and hardswish composed of add, clipped relu, mul and div: what the epilogue computes (NaN and
    infinities included: NaN and -inf give NaN, +inf stays)."""
    values = np.array([-np.inf, -7.0, -3.0, -2.5, -1e-3, 0.0, 0.7, 2.9, 3.0, 5.0, 1e4, np.inf, np.nan], np.float32)
    bias, residual = np.float32(0.25), np.linspace(-1, 1, values.size).astype(np.float32)
    graph = NumpyGraph(r=residual, b=bias)
    e = modules.pointwise.Epilogue(True, True, "hardswish")
    with np.errstate(invalid="ignore"):
        out, extra = modules.pointwise.nodes(graph, e, values, 1, None, lambda name: graph.tensor(name, [], [], None), None)
        v = values + bias + residual
        expected = v * np.clip(v + 3, 0, 6) / 6
    assert len(extra) == 2 and np.array_equal(out, expected, equal_nan=True), (out, expected)
    assert modules.pointwise.in_graph("hardswish") and modules.pointwise.in_graph("none") and not modules.pointwise.in_graph("elu")


@dataclass
class FakePlan:
    geometry: Any
    fails: bool = False

    def run(self, *arrays: Any) -> None:
        if self.fails:
            raise RuntimeError("CUDNN_STATUS_BAD_PARAM")


def _geometry(cudnn: Any, channels: int = 32, groups: int = 1) -> Any:
    return cudnn.Geometry("fprop", (8, channels, 14, 14), (channels, channels // groups, 3, 3), (8, channels, 14, 14), (1, 1),
                          (1, 1), (1, 1), (1, 1), "float16", True)


def _install(monkeypatch: pytest.MonkeyPatch, m: Any, builds: bool = True, runs: bool = True,
             times: tuple[float, float] = (1.0, 2.0)) -> list[tuple[Any, str]]:
    """Fake plans: the fused graph builds and runs (or not), find's timings (fused, plain and epilogue)."""
    asked: list[tuple[Any, str]] = []

    def plan(g: Any, algorithm: str) -> FakePlan:
        asked.append((g.epilogue, algorithm))
        if g.epilogue is not None and not builds:
            raise m.cudnn.NotServed("cuDNN's heuristics offer no engine for this fprop layer")
        return FakePlan(g, fails=g.epilogue is not None and not runs)

    timings = iter(times)
    monkeypatch.setattr(m.cudnn, "plan", plan)
    monkeypatch.setattr(m.fusion, "_Arrays", lambda g, after: types.SimpleNamespace(x=0, w=0, y=0, extra=[],
                                                                                   separately=lambda plain: None))
    monkeypatch.setattr(m.fusion, "_time", lambda run: (run(), next(timings))[1])
    return asked


def test_guess_takes_the_fused_graph_where_it_builds_and_runs(modules: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    m = modules
    _install(monkeypatch, m)
    choice = m.fusion.choose(_geometry(m.cudnn), m.pointwise.Epilogue(True, False, "hardswish"), "guess")
    assert choice.plan.geometry.epilogue is not None and choice.note == ""
    assert m.fusion.choose(_geometry(m.cudnn), None, "guess").plan.geometry.epilogue is None


@pytest.mark.parametrize("builds, runs, said", [(False, True, "no fused cuDNN graph builds: cuDNN's heuristics"),
                                                (True, False, "the fused cuDNN graph does not run: RuntimeError")])
def test_a_fused_graph_that_does_not_build_or_run_leaves_the_epilogue_with_the_reason(
        modules: Any, monkeypatch: pytest.MonkeyPatch, builds: bool, runs: bool, said: str) -> None:
    m = modules
    _install(monkeypatch, m, builds=builds, runs=runs)
    choice = m.fusion.choose(_geometry(m.cudnn, 48), m.pointwise.Epilogue(True, True, "relu"), "guess")
    assert choice.plan.geometry.epilogue is None and choice.note.startswith(said), choice.note


def test_guess_runs_grouped_convolutions_plain_and_says_so(modules: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    m = modules
    asked = _install(monkeypatch, m)
    choice = m.fusion.choose(_geometry(m.cudnn, 64, groups=64), m.pointwise.Epilogue(True, False, "relu"), "guess")
    assert choice.plan.geometry.epilogue is None and choice.note == m.fusion.GROUPED
    assert [epilogue for epilogue, _ in asked] == [None], "the fused graph must not even be built"


@pytest.mark.parametrize("times, fused", [((1.0, 2.0), True), ((3.0, 2.0), False)])
def test_find_keeps_the_faster_of_the_fused_graph_and_the_plain_plan_with_the_epilogue(
        modules: Any, monkeypatch: pytest.MonkeyPatch, times: tuple[float, float], fused: bool) -> None:
    m = modules
    asked = _install(monkeypatch, m, times=times)
    choice = m.fusion.choose(_geometry(m.cudnn, 64, groups=64), m.pointwise.Epilogue(True, False, "hardswish"), "find")
    assert (choice.plan.geometry.epilogue is not None) == fused and {a for _, a in asked} == {"find"}
    assert fused or choice.note == "find timed the fused graph at 3000.0 us, the plain convolution and the epilogue at 2000.0 us"
    again = m.fusion.choose(_geometry(m.cudnn, 64, groups=64), m.pointwise.Epilogue(True, False, "hardswish"), "find")
    assert again is choice, "find times a layer once"


def test_an_activation_no_graph_computes_runs_in_the_epilogue(modules: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    m = modules
    _install(monkeypatch, m)
    choice = m.fusion.choose(_geometry(m.cudnn, 16), m.pointwise.Epilogue(False, False, "mish"), "guess")
    assert choice.plan.geometry.epilogue is None and choice.note == "no cuDNN graph node computes mish"


def test_float32_runs_on_tensor_cores_nhwc_and_fused_only_with_tf32_and_an_engine_cudnn_picks(modules: types.SimpleNamespace) -> None:
    """float32 forward convolutions run NHWC and fuse what follows where TF32 is wished and cuDNN picks the engine
    (guess, find); a named legacy engine (winograd_nonfused: no NHWC form) and float32 without TF32 run as the
    input is, with the epilogue pass; the half precisions run NHWC and fuse whatever the algorithm."""
    import algoswap
    from algoswap_cuda import conv

    def rule(dtype: str, algorithm: str) -> tuple[bool, bool]:
        nhwc = conv.runs_channels_last(dtype, False, algorithm)
        return nhwc, conv._after(dtype, True, False, "relu", nhwc) is not None

    with algoswap.tf32_wishes(conv=False, matmul=False):
        assert rule("float32", "guess") == (False, False)
    with algoswap.tf32_wishes(conv=True, matmul=False):
        assert rule("float32", "guess") == rule("float32", "find") == (True, True)
        assert rule("float32", "winograd_nonfused") == (False, False)
        assert rule("float64", "guess") == (False, False)
    for dtype in ("float16", "bfloat16"):
        assert rule(dtype, "winograd_nonfused") == rule(dtype, "guess") == (True, True)
    assert conv.runs_channels_last("float32", True, "winograd_nonfused"), "an NHWC input stays NHWC"


@pytest.mark.parametrize("keeping", ["second", "fallback", "none"])
def test_guess_takes_the_first_float16_plan_that_keeps_infinities(modules: Any, monkeypatch: pytest.MonkeyPatch,
                                                                   keeping: str) -> None:
    """_cudnn._guess on a float16 forward geometry: cuDNN's ranked plans, then the named fallbacks, probed in turn
    (_exact.keeps_infinities); the first that keeps them is taken, else the first plan, marked as losing them
    (conv2d then runs the repairing kernel after it). bfloat16 plans are not probed."""
    m = modules.cudnn
    probed: list[str] = []
    keeps = {"second": "ranked 1", "fallback": "named implicit_gemm", "none": ""}[keeping]
    monkeypatch.setattr(m, "_ranked", lambda g: (None, (), 3))
    monkeypatch.setattr(m, "_candidates", lambda g, graph, count, tf32, limit: ((i, 40 + i) for i in range(min(count, limit))))
    monkeypatch.setattr(m, "_finish", lambda g, graph, tensors, index, engine, tf32: m.Plan(g, engine, f"ranked {index}", 0, print))
    monkeypatch.setattr(m, "_named", lambda g, name, probe=True: m.Plan(g, 0, f"named {name}", 0, print))
    monkeypatch.setattr(m._exact, "keeps_infinities", lambda plan: probed.append(plan.name) or plan.name == keeps)
    chosen = m._guess(_geometry(m), False)
    assert chosen.name == (keeps or "ranked 0") and chosen.loses_infinities == (keeping == "none")
    assert probed[-1] == chosen.name or keeping == "none"
    assert probed[:3] == ["ranked 0", "ranked 1", "ranked 2"][:len(probed[:3])] and len(probed) <= 3 + len(m.SATURATION_FALLBACK)
    probed.clear()
    plain = m._guess(dataclasses.replace(_geometry(m), dtype="bfloat16"), False)
    assert plain.name == "ranked 0" and not plain.loses_infinities and probed == [], "bfloat16 keeps them: not probed"
