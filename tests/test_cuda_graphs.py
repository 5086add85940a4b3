"""CUDA graphs (algoswap_cuda._graphs): a swap_backend Model called with CUDA tensors captures its
forward pass at the second call of an input signature and replays it after, with the results of the
eager steps. Without a GPU these tests are skipped (the protocol is tested in test_capture.py)."""

from __future__ import annotations

from typing import Any

import pytest

import algoswap
from helpers import relative_error

algoswap_cuda = pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
torch = pytest.importorskip("torch")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
gpu = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
SIZE = 64  # small images: the graph has every layer of ResNet-18 all the same


def _resnet18() -> Any:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def _inputs(batch: int, count: int) -> list[Any]:
    return [torch.randn(batch, 3, SIZE, SIZE, device="cuda") for _ in range(count)]


def _modes(model: Any, inputs: list[Any]) -> tuple[list[Any], list[str]]:
    outputs, modes = [], []
    for x in inputs:
        outputs.append(model(x))
        modes.append(model.capture_report.mode)
    return outputs, modes


@gpu
def test_a_swapped_resnet_replays_its_forward_pass_with_the_eager_results() -> None:
    module = _resnet18()
    model, eager = algoswap.swap_backend(module), algoswap.swap_backend(module)
    eager.capture = False
    inputs = _inputs(2, 4)
    outputs, modes = _modes(model, inputs)
    assert modes == ["eager", "capture", "replay", "replay"], model.explain().capture
    expected = [eager(x) for x in inputs]
    assert all(out.device.type == "cuda" for out in outputs)
    for out, ref in zip(outputs, expected):  # earlier outputs too: a later replay does not overwrite them
        assert relative_error(out, ref) <= 1e-5
    assert model.explain().capture.startswith("replayed the cuda graph")
    assert "graph capture: replayed" in str(model.explain())
    assert eager.capture_report.mode == "eager" and "capture is off" in eager.explain().capture


@gpu
def test_a_new_batch_size_captures_again_and_the_first_one_still_replays() -> None:
    model = algoswap.swap_backend(_resnet18())
    _, modes = _modes(model, _inputs(1, 2) + _inputs(3, 2) + _inputs(1, 1))
    assert modes == ["eager", "capture", "eager", "capture", "replay"]


@gpu
def test_a_step_that_reads_a_value_on_the_host_leaves_the_model_eager() -> None:
    """cuDNN's winograd_nonfused saturates NaN and inf, so its plan first scans the operands on the host:
    recording fails, and the model runs eagerly (with the eager results) and says why."""
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU()).eval()
    request = {"conv2d": "cuda:winograd_nonfused"}
    model, eager = algoswap.swap_backend(module, request), algoswap.swap_backend(module, request)
    eager.capture = False
    inputs = [torch.randn(2, 16, 16, 16, device="cuda") for _ in range(3)]
    outputs, modes = _modes(model, inputs)
    assert modes == ["eager"] * 3
    assert "capture failed" in model.explain().capture, model.explain().capture
    for out, x in zip(outputs, inputs):
        assert relative_error(out, eager(x)) == 0


@gpu
def test_a_model_called_with_host_tensors_runs_eagerly_and_says_why() -> None:
    model = algoswap.swap_backend(_resnet18(), "cuda:default")
    for x in _inputs(1, 2):
        model(x.cpu())
    assert model.capture_report.mode == "eager" and "arrives in another memory space" in model.capture_report.reason
