"""A convolution's geometry (algoswap.ConvGeometry) is computed once, when its call is bound: the shape
rule's output is the geometry's, and an implementation computing it from its own arguments
(algoswap.conv_geometry) gets an equal one. Its sizes are torch's."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import algoswap
from algoswap.testing._cases import bind, cases_for

torch = pytest.importorskip("torch")
F = torch.nn.functional

CONV_OPS = ("conv2d", "conv2d_fused", "conv2d_grad_input", "conv2d_grad_weight")
ATTRS = ("stride", "padding", "dilation", "groups", "padding_mode")
# (input, weight) and attributes: strides, every padding form, dilations, groups and padding modes
GRID = [
    (((2, 4, h, w), (6, 4 // groups, k, k)), {"stride": s, "padding": p, "dilation": d, "groups": groups, "padding_mode": mode})
    for (h, w), k, s, p, d, groups, mode in itertools.product(
        [(9, 11), (6, 5)], [1, 3], [1, (2, 3)], [0, 2, (1, 2), ((2, 0), (1, 3)), "same", "valid"], [1, (2, 1)], [1, 2],
        ["zeros", "reflect", "replicate", "circular"])
]


def _bound_or_none(shapes: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
    try:
        return bind("conv2d", (*shapes, None), "float32", attrs)
    except algoswap.OpArgumentError:
        return None  # 'same' with a stride, reflect padding wider than the input, a kernel that does not fit


def _torch_output(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]) -> tuple[int, ...]:
    """The output shape of torch's convolution, given the attributes as a user would give them."""
    x, w = torch.zeros(x_shape), torch.zeros(w_shape)
    padding, mode = attrs["padding"], attrs["padding_mode"]
    rest = {"stride": attrs["stride"], "dilation": attrs["dilation"], "groups": attrs["groups"]}
    if isinstance(padding, tuple) and isinstance(padding[0], tuple):  # explicit: torch pads first
        (top, bottom), (left, right) = padding
        x = F.pad(x, (left, right, top, bottom), mode="constant" if mode == "zeros" else mode)
        return tuple(F.conv2d(x, w, **rest).shape)
    layer = torch.nn.Conv2d(x_shape[1], w_shape[0], w_shape[2:], padding=padding, padding_mode=mode, bias=False, **rest)
    return tuple(layer(x).shape)


def test_the_bound_geometry_is_torchs() -> None:
    """Over the grid, the geometry's output and padded sizes are torch's; where bind refuses, so does torch."""
    for shapes, attrs in GRID:
        call = _bound_or_none(shapes, attrs)
        if call is None:
            with pytest.raises((RuntimeError, ValueError)):
                _torch_output(*shapes, attrs)
            continue
        geometry = call.geometry
        assert isinstance(geometry, algoswap.ConvGeometry)
        assert geometry.output == call.out_shape == _torch_output(*shapes, attrs), (shapes, attrs)
        assert (geometry.input, geometry.weight) == shapes and geometry.padding == call.attrs["padding"]
        (top, bottom), (left, right) = geometry.padding
        assert geometry.padded == tuple(F.pad(torch.zeros(shapes[0]), (left, right, top, bottom)).shape)
        first = geometry.padded_first()
        assert (first.input, first.output, first.padding, first.padding_mode) == (geometry.padded, geometry.output, ((0, 0), (0, 0)), "zeros")


def test_the_grid_spans_what_it_says() -> None:
    bound = [call for call in (_bound_or_none(*case) for case in GRID) if call is not None]
    assert {c.attrs["padding_mode"] for c in bound} == {"zeros", "reflect", "replicate", "circular"}
    assert {c.attrs["stride"] for c in bound} == {(1, 1), (2, 3)} and {c.attrs["dilation"] for c in bound} == {(1, 1), (2, 1)}
    assert any(c.attrs["padding"][0] != c.attrs["padding"][1] for c in bound) and len(bound) > len(GRID) // 2


@pytest.mark.parametrize("op", CONV_OPS)
def test_an_implementation_computes_the_geometry_bind_made(op: str) -> None:
    """What a backend computes from the arguments it is given equals the call's own geometry, for every case
    of the conformance table; the gradient ops carry the forward convolution's."""
    for shapes, attrs in cases_for(op):
        call = bind(op, shapes, "float32", attrs)
        a = call.attrs
        x = a["input_size"] if op == "conv2d_grad_input" else call.shape("input")
        w = a["weight_size"] if op == "conv2d_grad_weight" else call.shape("weight")
        assert algoswap.conv_geometry(x, w, **{name: a[name] for name in ATTRS}) == call.geometry, (op, shapes, attrs)
        if op in ("conv2d", "conv2d_fused"):
            assert call.out_shape == call.geometry.output
        else:
            assert call.shape("grad_output") == call.geometry.output


def test_the_geometry_takes_the_json_lists_a_graph_or_torch_layer_may_pass() -> None:
    listed = algoswap.conv_geometry([1, 2, 8, 7], [3, 2, 3, 3], stride=[2, 1], padding=[[1, 0], [2, 1]], dilation=[1, 2])
    assert listed == algoswap.conv_geometry((1, 2, 8, 7), (3, 2, 3, 3), stride=(2, 1), padding=((1, 0), (2, 1)), dilation=(1, 2))
    assert listed.output == (1, 3, 4, 6) and listed.stride == (2, 1) and listed.padding == ((1, 0), (2, 1))
    assert {listed: "a cache key"}[listed]  # frozen: backends may key their caches on it


def test_ops_without_a_geometry_rule_have_none() -> None:
    assert bind("relu", ((3, 4),), "float32", {}).geometry is None
    assert bind("conv2d_grad_bias", ((2, 3, 4, 4),), "float32", {}).geometry is None


def test_a_spec_needs_a_shape_rule_or_a_geometry_rule() -> None:
    with pytest.raises(TypeError, match="OpSpec 'shapeless': a shape_rule is required"):
        algoswap.OpSpec("shapeless", (algoswap.Input("input"),), ())
