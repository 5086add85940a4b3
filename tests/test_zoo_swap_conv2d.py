"""Every zoo model, every available conv2d algorithm, through swap_conv2d: outputs match PyTorch."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402


def conv_algorithms() -> list[str]:
    registry = algoswap.registry()
    # host-memory backends only: these models run on the CPU (tests/test_cuda.py runs them on a GPU)
    return [i.qualified for i in registry.implementations("conv2d")
            if registry.backends[i.backend].availability() is True and registry.backends[i.backend].memory.is_host]


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[torch.nn.Module, torch.Tensor, torch.Tensor]]:
    built = {}
    for name in zoo.MODELS:
        model, x = zoo.build(name), zoo.sample_input(name, 1, small=True)
        with torch.no_grad():
            built[name] = (model, x, model(x))
    return built


@pytest.mark.parametrize("algorithm", conv_algorithms())
@pytest.mark.parametrize("name", zoo.MODELS)
def test_swap_conv2d_matches_pytorch(models: dict, name: str, algorithm: str) -> None:
    model, x, expected = models[name]
    swapped = copy.deepcopy(model)
    # algorithms that serve only some layers (winograd: 3x3, stride 1) run where they can
    algoswap.swap_conv2d(swapped, algoswap.prefer(algorithm), sample_input_shape=tuple(x.shape))
    with torch.no_grad():
        got = swapped(x)
    assert_close(got, expected, **network_terms(model), context=f"{name} with {algorithm}")
    ran = {row.implementation for row in algoswap.explain(swapped)}
    assert algorithm in ran, f"{algorithm} ran on no layer of {name}: {ran}"


@pytest.mark.parametrize("name", ["resnet18", "mobilenet", "squeezenet"])
def test_swap_conv2d_float64(name: str) -> None:
    model = zoo.build(name, dtype=torch.float64)
    x = zoo.sample_input(name, 2, small=True, dtype=torch.float64)
    with torch.no_grad():
        expected = model(x)
        algoswap.swap_conv2d(model, "smm")
        assert_close(model(x), expected, **network_terms(model), context=name)
