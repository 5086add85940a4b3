"""A swapped layer's call path (algoswap._torch.bridge.run): eager calls that record autograd go through a plain
autograd Function (EagerCall) instead of the custom op's dispatcher; calls under torch.compile, traced and meta
calls still take the custom op. The gradient plan is worked out once per call signature, and the parameters a
layer reads are never stale: in-place updates (``weight.data.mul_``, an optimizer step) and a replaced ``.data``
are seen at the next call."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import algoswap  # noqa: E402
from algoswap._core_caches import TORCH_CALLS  # noqa: E402
from algoswap._torch import bridge  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402


def _pair(op: str) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """A float64 torch layer, its twin swapped to the NumPy reference, and an input."""
    torch.manual_seed(3)
    if op == "conv2d":
        layer, x = nn.Conv2d(3, 4, 3, padding=1).double(), torch.randn(2, 3, 6, 6, dtype=torch.float64)
        return layer, algoswap.swap_conv2d(copy.deepcopy(layer), "numpy:direct"), x
    layer, x = nn.Linear(5, 4).double(), torch.randn(3, 5, dtype=torch.float64)
    return layer, algoswap.swap_operation("linear", copy.deepcopy(layer), "numpy:default"), x


def _gradients(layer: nn.Module, x: torch.Tensor) -> tuple[Any, ...]:
    x = x.clone().requires_grad_(True)
    out = layer(x)
    return (out, *torch.autograd.grad((out * out).sum(), [x, *layer.parameters()]))


@pytest.mark.parametrize("op", ["conv2d", "linear"])
def test_eager_autograd_calls_run_through_the_autograd_function_and_match_torch(op: str) -> None:
    plain, swapped, x = _pair(op)
    out = swapped(x.clone().requires_grad_(True))
    assert type(out.grad_fn).__name__ == "EagerCallBackward"  # not the custom op's dispatcher
    terms = network_terms(plain, backward_of=tuple(x.shape))
    for got, expected in zip(_gradients(swapped, x), _gradients(plain, x)):
        assert_close(got, expected, **terms)


def test_meta_tensors_recording_autograd_still_take_the_custom_ops_meta_kernel() -> None:
    conv = algoswap.swap_conv2d(nn.Conv2d(3, 4, 3).to("meta"))
    out = conv(torch.empty(1, 3, 8, 8, device="meta"))
    assert out.is_meta and out.shape == (1, 4, 6, 6) and type(out.grad_fn).__name__ != "EagerCallBackward"


def test_torch_compile_traces_swapped_layers_without_autograd_too() -> None:
    """Under torch.compile every call takes the custom op (it used to take the direct path when no autograd was
    recorded, which dynamo cannot trace: a graph break, an error with fullgraph=True)."""
    plain, swapped, x = _pair("conv2d")
    torch._dynamo.reset()
    compiled = torch.compile(swapped, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(x), plain(x), **network_terms(plain))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ops whose gradient choices are worked out from now on (the caches emptied first)."""
    asked: list[str] = []
    choices = bridge.gradient_choices
    monkeypatch.setattr(bridge, "gradient_choices", lambda selection: asked.append(selection.call.op) or choices(selection))
    algoswap.registry().selection_cache.clear()
    return asked


def test_the_gradient_plan_is_worked_out_once_per_call_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _counting(monkeypatch)
    _, swapped, x = _pair("conv2d")
    for _ in range(3):
        _gradients(swapped, x)
    assert asked == ["conv2d"]
    _gradients(swapped, x[:1])  # another input shape: another call signature
    assert asked == ["conv2d", "conv2d"]


def test_the_gradient_plan_goes_with_its_entry_of_the_bounded_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept in the torch_calls cache's entry of the call (bounded by that kind's limit), never apart from it:
    an evicted entry's plan is worked out again."""
    limit = algoswap.cache_limits()["torch_calls"].size
    algoswap.set_cache_limit("torch_calls", 4)  # one conv2d call and its three gradient ops
    try:
        asked = _counting(monkeypatch)
        _, swapped, x = _pair("conv2d")
        for batch in (2, 1, 2):
            _gradients(swapped, x[:batch])
            assert len(algoswap.registry().selection_cache.prepared(TORCH_CALLS)) <= 4
        assert asked == ["conv2d"] * 3
    finally:
        algoswap.set_cache_limit("torch_calls", limit)


@pytest.mark.parametrize("op", ["conv2d", "linear"])
def test_weights_changed_in_place_or_replaced_are_seen_at_the_next_call(op: str) -> None:
    """In-place updates of parameters between calls (``weight.data.mul_``, SGD steps on the gradients the swapped
    layer computed) and a replaced ``.data``: every call computes with the weights as they are then."""
    plain, swapped, x = _pair(op)
    terms = network_terms(plain, backward_of=tuple(x.shape), steps=4)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, swapped)]
    for step in range(4):
        for module, optimizer in zip((plain, swapped), optimizers):
            optimizer.zero_grad()
            loss = (module(x) ** 2).sum()
            loss.backward()
            optimizer.step()
            if step == 1:
                with torch.no_grad():
                    module.weight.data.mul_(2)
        for got, expected in zip(_gradients(swapped, x), _gradients(plain, x)):
            assert_close(got, expected, **terms)
        with torch.no_grad():
            assert_close(swapped(x), plain(x), **terms)
    swapped.weight.data = plain.weight.data.clone() * 3
    plain.weight.data = plain.weight.data * 3
    with torch.no_grad():
        assert_close(swapped(x), plain(x), **terms)
    for got, expected in zip(_gradients(swapped, x), _gradients(plain, x)):
        assert_close(got, expected, **terms)


@pytest.mark.parametrize("op", ["conv2d", "linear"])
def test_a_gradient_of_a_gradient_is_an_error_naming_the_op_never_zero(op: str) -> None:
    """The gradient ops declare no gradients of their own: differentiating a swapped layer's gradient again (after
    backward with create_graph=True) raises an error naming the gradient op and its input, where autograd would
    otherwise take that gradient as zero; a first-order gradient with create_graph=True still matches torch's."""
    layer, swapped, x = _pair(op)
    x = x.clone().requires_grad_(True)
    (first,) = torch.autograd.grad((swapped(x) ** 2).sum(), [x], create_graph=True)
    (expected,) = torch.autograd.grad((layer(x) ** 2).sum(), [x], create_graph=True)
    assert_close(first.detach(), expected.detach(), **network_terms(layer))
    with pytest.raises(algoswap.NoImplementationError, match=rf"{op}_grad_\w+: no gradient with respect to '\w+'"):
        torch.autograd.grad(first.sum(), [swapped.weight])
