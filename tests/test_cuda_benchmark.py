"""The CUDA backend's benchmark mode: ``guess`` (the default convolution) chooses its cuDNN engine by timing,
as ``find`` does (find's plans and cache), where ``set_benchmark``, else ALGOSWAP_CUDA_BENCHMARK, else the
caller's wish (``torch.backends.cudnn.benchmark`` for a swapped torch model) says so; its kernel string then
says so. The switch's order is checked without a GPU (CuPy imports without one); the rest needs a GPU
(benchmarks/cuda_device_run.sh) and is skipped without one, with the backend's reason."""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap._wishes import WISHES, Wishes
from helpers import assert_close, assert_op_close, derived_seed, network_terms

algoswap_cuda = pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
pytest.importorskip("cupy", reason="CuPy is not installed")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
gpu = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
BY_TORCH = "; engine chosen by timing (torch.backends.cudnn.benchmark)"
SHAPES = [(8, 64, 28, 28), (64, 64, 3, 3), (64,)]


@contextmanager
def _wishing(benchmark: bool | None) -> Iterator[None]:
    """The benchmark wish a swapped torch call makes, for the block."""
    token = WISHES.set(Wishes(benchmark=benchmark))
    try:
        yield
    finally:
        WISHES.reset(token)


@pytest.fixture(autouse=True)
def _no_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ALGOSWAP_CUDA_BENCHMARK", raising=False)
    yield
    algoswap_cuda.set_benchmark(None)


# ----------------------------------------------------------------------------- without a GPU too

def test_set_benchmark_then_the_variable_then_the_wish_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    from algoswap_cuda import _runtime, conv

    assert _runtime.benchmark() == "" and conv._by_timing("guess") == ("guess", "")
    with _wishing(True):
        assert _runtime.benchmark() == "torch.backends.cudnn.benchmark"
        assert conv._by_timing("guess") == ("find", "torch.backends.cudnn.benchmark")
        assert conv._by_timing("guess", "dgrad") == ("guess", "")  # gradients keep the heuristic pick
        assert conv._by_timing("implicit_gemm") == ("implicit_gemm", "")
        monkeypatch.setenv("ALGOSWAP_CUDA_BENCHMARK", "0")
        assert _runtime.benchmark() == ""
        algoswap_cuda.set_benchmark(True)
        assert _runtime.benchmark() == "algoswap_cuda.set_benchmark(True)"
    algoswap_cuda.set_benchmark(None)
    monkeypatch.setenv("ALGOSWAP_CUDA_BENCHMARK", "1")
    with _wishing(False):
        assert _runtime.benchmark() == "ALGOSWAP_CUDA_BENCHMARK=1"
    monkeypatch.setenv("ALGOSWAP_CUDA_BENCHMARK", "yes")  # neither "0" nor "1": no say
    assert _runtime.benchmark() == ""


# ----------------------------------------------------------------------------- on a GPU

def _kernel(algorithm: str) -> str:
    return algoswap.select("conv2d", SHAPES, algorithm=algorithm, memory="cuda", padding=1).kernel


@gpu
def test_guess_with_the_wish_runs_finds_timed_plan_and_says_so() -> None:
    from algoswap_cuda import conv

    assert "by timing" not in _kernel("cuda:guess")
    rng = np.random.default_rng(derived_seed(41))
    x, w, b = (rng.standard_normal(shape).astype(np.float32) * scale for shape, scale in zip(SHAPES, (1.0, 0.05, 0.1)))
    with _wishing(True):
        assert _kernel("cuda:guess") == _kernel("cuda:find") + BY_TORCH  # find's plan: the same label
        out = algoswap.ops.call("conv2d", x, w, b, algorithm="cuda:guess", transfer=True, padding=1)
    assert any(key[0] == "find" and key[1] == x.shape for key in conv._forward_plans.keys())
    reference = algoswap.ops.call("conv2d", *(a.astype(np.float64) for a in (x, w, b)), algorithm="numpy:default", padding=1)
    assert_op_close("conv2d", out, reference, [x, w, b], {"padding": 1}, context="cuda:guess chosen by timing")


@gpu
def test_the_backends_own_switches_override_the_wish(monkeypatch: pytest.MonkeyPatch) -> None:
    with _wishing(True):
        monkeypatch.setenv("ALGOSWAP_CUDA_BENCHMARK", "0")
        assert "by timing" not in _kernel("cuda:guess")
    monkeypatch.delenv("ALGOSWAP_CUDA_BENCHMARK")
    algoswap_cuda.set_benchmark(True)
    assert _kernel("cuda:guess") == _kernel("cuda:find") + "; engine chosen by timing (algoswap_cuda.set_benchmark(True))"


@pytest.fixture
def torch_flags() -> Iterator[Any]:
    """torch, with TF32 off for convolutions (a float32 comparison); its flags put back afterwards."""
    torch = pytest.importorskip("torch")
    flags = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield torch
    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = flags


@gpu
def test_a_swapped_layer_follows_cudnn_benchmark(torch_flags: Any) -> None:
    torch = torch_flags
    torch.manual_seed(0)
    plain = torch.nn.Conv2d(32, 48, 3, padding=1).cuda()
    swapped = algoswap.swap_conv2d(copy.deepcopy(plain), "cuda:guess")
    x = torch.randn(4, 32, 14, 14, device="cuda")
    for timed in (True, False, True):
        torch.backends.cudnn.benchmark = timed
        with torch.no_grad():
            out, expected = swapped(x), plain(x)
        assert_close(out.cpu(), expected.cpu(), **network_terms(plain))
        kernel = algoswap.explain(swapped)[0].kernel
        assert kernel.endswith(BY_TORCH) is timed, kernel


@gpu
def test_a_swapped_model_times_its_convolutions_and_captures_again_when_benchmark_flips(torch_flags: Any) -> None:
    torch = torch_flags
    torch.manual_seed(1)
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()).eval()
    model = algoswap.swap_backend(module)
    x = torch.randn(2, 16, 16, 16, device="cuda")
    with torch.no_grad():
        expected = module(x.cpu())
    torch.backends.cudnn.benchmark = False
    for _ in range(3):
        model(x)
    assert model.capture_report.mode == "replay"
    convs = [row.kernel for row in model.explain() if row.op.startswith("conv2d")]
    assert len(convs) == 2 and not any("by timing" in kernel for kernel in convs), convs
    torch.backends.cudnn.benchmark = True
    out = model(x)
    assert model.capture_report.mode == "eager" and "by timing" in model.capture_report.reason, model.capture_report
    assert_close(out.cpu(), expected, **network_terms(module))
    model(x)
    assert model.capture_report.mode == "capture"
    convs = [row.kernel for row in model.explain() if row.op.startswith("conv2d")]
    assert len(convs) == 2 and all(kernel.endswith(BY_TORCH) for kernel in convs), convs
