"""swap_conv2d / swap_operation against the torch modules they replace, over each op's attribute space."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import algoswap  # noqa: E402
from helpers import as_float64, assert_close, derived_seed, network_terms  # noqa: E402
from algoswap.testing._cases import FORWARD  # noqa: E402
from algoswap.testing._scales import gradient_scales  # noqa: E402
from helpers import assert_op_close  # noqa: E402


def conv_module(shapes: tuple, attrs: dict) -> nn.Module | None:
    (_, channels, _, _), (out, per_group, kh, kw), bias = shapes
    padding = attrs.get("padding", 0)
    if isinstance(padding, tuple) and isinstance(padding[0], tuple):
        return None  # asymmetric explicit padding has no nn.Conv2d equivalent
    return nn.Conv2d(channels, out, (kh, kw), attrs.get("stride", 1), padding, attrs.get("dilation", 1),
                     attrs.get("groups", 1), bias is not None, attrs.get("padding_mode", "zeros"))


def torch_module(op: str, shapes: tuple, attrs: dict) -> nn.Module | None:
    """The torch module computing ``op`` with these attributes (None where torch has none)."""
    if op == "conv2d":
        return conv_module(shapes, attrs)
    if op == "linear":
        (features, (out, _), bias) = shapes[0][-1], shapes[1], shapes[2]
        return nn.Linear(features, out, bias is not None)
    modules = {"maxpool2d": nn.MaxPool2d, "avgpool2d": nn.AvgPool2d, "adaptiveavgpool2d": nn.AdaptiveAvgPool2d,
               "relu": nn.ReLU, "flatten": nn.Flatten}
    return modules[op](**attrs)


def unit_cases() -> list[Any]:
    params = []
    registry = algoswap.registry()
    for op in ("conv2d", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "flatten"):
        for impl in registry.implementations(op):
            for index, (shapes, attrs) in enumerate(FORWARD[op]):
                if torch_module(op, shapes, attrs) is not None and _supported(op, impl.qualified, shapes, attrs):
                    params.append(pytest.param(op, impl.qualified, shapes, attrs, id=f"{impl.qualified}-{op}-{index}"))
    return params


def _supported(op: str, request: str, shapes: tuple, attrs: dict) -> bool:
    try:
        algoswap.select(op, shapes, "float64", request, **attrs)
        return True
    except algoswap.NoImplementationError:
        return False


@pytest.mark.parametrize("op, request_, shapes, attrs", unit_cases())
def test_swapped_module_matches_torch_forward_and_backward(op: str, request_: str, shapes: tuple, attrs: dict) -> None:
    reference = torch_module(op, shapes, attrs).double()
    swapped = algoswap.swap_operation(op, copy.deepcopy(reference), request_)
    x = torch.randn(shapes[0], dtype=torch.float64, requires_grad=True)
    expected, got = reference(x), swapped(x)
    inputs = [as_float64(x), *(as_float64(p) for p in reference.parameters())]
    if op in ("conv2d", "linear") and reference.bias is None:
        inputs.append(None)
    assert_op_close(op, got, expected, inputs, attrs)
    grad = torch.randn_like(expected)
    wrt = [x, *reference.parameters()]
    expected_grads = torch.autograd.grad(expected, wrt, grad)
    got_grads = torch.autograd.grad(got, [x, *swapped.parameters()], grad)
    scales = gradient_scales(op, inputs, attrs, grad, expected)
    for name, a, b in zip(["input", *dict(reference.named_parameters())], got_grads, expected_grads):
        scale, length = scales[name]
        assert_close(a, b, reduction_length=length, scale=scale, context=f"gradient of {name}")


def small_cnn(seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A small CNN initialised from the session seed (the same for the same ``seed`` within a test)."""
    with torch.random.fork_rng():
        torch.manual_seed(derived_seed(seed))
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 5, padding=2, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d((2, 2)),
            nn.Flatten(), nn.Linear(64, 10),
        ).to(dtype)


@pytest.mark.parametrize("layout", ["channels_last", "transposed_view", "sliced_view"])
def test_any_memory_layout_gives_correct_results(layout: str) -> None:
    model = small_cnn()
    x = torch.randn(2, 3, 16, 16)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "transposed_view":
        x = torch.randn(2, 3, 16, 16).transpose(2, 3)
    else:
        x = torch.randn(2, 3, 32, 16)[:, :, ::2, :]
    assert not x.is_contiguous()
    expected = model(x)
    algoswap.swap_conv2d(model, "smm")
    assert_close(model(x), expected, **network_terms(model))


def test_float64_end_to_end() -> None:
    model = small_cnn(dtype=torch.float64)
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    expected = model(x)
    for op in ("conv2d", "relu", "maxpool2d", "adaptiveavgpool2d", "flatten", "linear"):
        algoswap.swap_operation(op, model)
    out = model(x)
    assert out.dtype == torch.float64
    assert_close(out, expected, **network_terms(model))  # half precision: tests/test_half_precision.py


def test_a_device_no_backend_serves_is_a_clear_error() -> None:
    conv = algoswap.swap_conv2d(nn.Conv2d(3, 4, 3).to("meta"))
    # (with autograd recording, meta tensors take the custom op's meta kernel: shapes only, as torch intends)
    with torch.no_grad(), pytest.raises(algoswap.NoImplementationError, match="works on host memory; the inputs are in meta memory"):
        conv(torch.empty(1, 3, 8, 8, device="meta"))


def test_unbatched_input_and_a_swapped_root_module() -> None:
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(3, 7, 7)
    swapped = algoswap.swap_conv2d(conv, "direct")
    assert isinstance(swapped, nn.Conv2d) and swapped is not conv and swapped.weight is conv.weight
    assert_close(swapped(x), conv(x), **network_terms(conv))


def test_parameter_views_are_kept_and_follow_the_parameter() -> None:
    """The bridge makes a parameter's backend view once; in-place updates show through it, a new
    ``.data`` gets a new view, and the view goes with the parameter."""
    import gc

    from algoswap._torch import transfer

    conv = nn.Conv2d(2, 3, 3, padding=1)
    swapped = algoswap.swap_conv2d(copy.deepcopy(conv), "numpy:smm")
    x = torch.randn(1, 2, 5, 5)
    with torch.no_grad():
        swapped(x)
        view = transfer._VIEWS[id(swapped.weight)][2]
        swapped(x)
        assert transfer._VIEWS[id(swapped.weight)][2] is view  # made once
        swapped.weight.mul_(2)
        conv.weight.mul_(2)
        assert_close(swapped(x), conv(x), **network_terms(conv))
        swapped.weight.data = torch.randn(3, 2, 3, 3)
        conv.weight.data = swapped.weight.data.clone()
        assert_close(swapped(x), conv(x), **network_terms(conv))
        assert transfer._VIEWS[id(swapped.weight)][2] is not view
    key = id(swapped.weight)
    del swapped
    gc.collect()
    assert key not in transfer._VIEWS
