"""swap_backend lowers views, permutations, indexing, splitting, padding and channel shuffle onto
registry ops (sizes computed when planning, so other input shapes work too), folds shape guards and
weight-only computations away, and lowers torchvision's fx-wrapped functions."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import ConversionError, UnsupportedModelError  # noqa: E402
from algoswap.graph import GraphError  # noqa: E402
from lowering_check import Fn, check_lowered, random_input  # noqa: E402

NCHW = (2, 4, 5, 6)


def _pieces(m: Any, x: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.chunk(2, dim=1)
    first, rest = torch.split(x, [1, 3], dim=1)
    parts = x.split(4, dim=-1)  # 6 columns: parts of 4 and 2
    c, _, e, _ = x.unbind(1)
    return [a * b, first, rest, parts[0], parts[1], c + e]


SHAPES = [
    ("permute", lambda m, x: torch.permute(x, (0, 2, 3, 1)), ["transpose"]),
    ("permute negative", lambda m, x: x.permute(0, -1, 1, 2), ["transpose"]),
    ("transpose swapaxes swapdims", lambda m, x: torch.transpose(x, 1, 2).swapaxes(-1, -2).swapdims(0, 1), ["transpose"]),
    ("view and reshape", lambda m, x: x.view(x.size(0), -1).reshape(x.shape[0], 4, -1).flatten(1), ["reshape", "flatten"]),
    ("unsqueeze squeeze unflatten", lambda m, x: torch.unflatten(x.unsqueeze(1).squeeze(), 3, (2, 3)), ["reshape"]),
    ("view_as reshape_as", lambda m, x: x.flatten(1).view_as(x) + x.flatten(2).reshape_as(x), ["reshape", "add"]),
    ("expand", lambda m, x: x[:, :1].expand(-1, 4, -1, -1) + x.mean(1, keepdim=True).expand_as(x), ["broadcast_to", "slice"]),
    ("getitem int", lambda m, x: x[:, 0], ["slice", "reshape"]),
    ("getitem mixed", lambda m, x: x[:, 1:3, ..., None] * x[None, :1, -2, :, None], ["slice", "reshape", "mul"]),
    ("getitem negative", lambda m, x: x[..., -2:] + x[:, -1:, :, 1:-3], ["slice", "add"]),
    ("getitem sizes in forward", lambda m, x: x[:, :, : x.shape[2] // 2, x.size(3) - 3 :], ["slice"]),
    ("getitem strided", lambda m, x: [x[:, ::2, 1::2] * 2, x[:, 1:4:3, -4::3, ::x.shape[3] // 2]], ["slice", "mul_scalar"]),
    ("getitem strided with ints and None", lambda m, x: [x[0, ::3, None, 1:4:1], x[..., ::5], x[:, :, 4:1:2]], ["slice", "reshape"]),
    ("repeat_interleave", lambda m, x: [x.repeat_interleave(2, dim=1), torch.repeat_interleave(x, x.shape[0] // 2, -1),
                                        x[0, 0].repeat_interleave(3)], ["broadcast_to", "reshape"]),
    ("roll as swin", lambda m, x: torch.roll(torch.roll(x, shifts=(-2, -3), dims=(1, 2)), shifts=(2, 3), dims=(1, 2)) * 2
                     + x.roll(x.shape[3], 3) + x.roll(7, -1), ["concat", "slice"]),
    ("roll flattened", lambda m, x: torch.roll(x, 5), ["concat", "slice", "reshape"]),
    ("repeat", lambda m, x: [x.repeat(1, 2, 1, 3), x[0].repeat(x.shape[0], 1, 1, 1), x.repeat((2, 1, 1, 1, 1))],
     ["broadcast_to", "reshape"]),
    ("gather by indices known now", lambda m, x: [x[:, :, [4, 0, 2, 2]], x[:, m.index], x[m.index, ...], x[..., m.index, :], x[:, :, :, m.index]],
     ["embedding", "transpose", "reshape"]),
    ("unfold as tnt", lambda m, x: m.unfold(x), ["slice", "concat", "reshape"]),
    ("unfold padded dilated strided", lambda m, x: [F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
                                                    F.unfold(x, 1)], ["slice", "pad", "concat", "reshape"]),
    ("chunk split unbind", _pieces, ["split", "mul", "reshape"]),
    ("stack and cat", lambda m, x: torch.cat([torch.stack([x, x * 2], dim=-1), torch.stack([x, x], -1)], dim=1), ["concat"]),
    ("pad constant", lambda m, x: F.pad(x, (1, 2, 0, 1), value=0.5), ["pad"]),
    ("pad reflect replicate", lambda m, x: F.pad(F.pad(x, (2, 1, 1, 1), mode="reflect"), (1, 1, 2, 0), mode="replicate"), ["pad"]),
    ("pad computed in forward", lambda m, x: F.pad(x, (0, x.shape[-1] % 4, 0, x.shape[-2] % 4)), ["pad"]),
    ("pad modules", lambda m, x: m.zero(m.reflect(x)), ["pad"]),
    ("channel shuffle as shufflenet", lambda m, x: x.view(x.size(0), 2, 2, 5, 6).transpose(1, 2).contiguous().view(x.size(0), -1, 5, 6),
     ["reshape", "transpose"]),
    ("channel shuffle function and module", lambda m, x: F.channel_shuffle(x, 2) + m.shuffle(x), ["reshape", "transpose", "add"]),
    ("identities", lambda m, x: m.identity(m.drop(F.dropout(x.contiguous().detach(), 0.5, training=False))) * 1, ["mul_scalar"]),
]


@pytest.mark.parametrize("function, ops", [c[1:] for c in SHAPES], ids=[c[0] for c in SHAPES])
def test_shape_lowering(function: Any, ops: list[str], rng: np.random.Generator) -> None:
    module = Fn(function, zero=nn.ZeroPad2d((1, 0, 2, 1)), reflect=nn.ReflectionPad2d(1), shuffle=nn.ChannelShuffle(2),
                identity=nn.Identity(), drop=nn.Dropout(0.2), unfold=nn.Unfold(2, stride=2), index=nn.Parameter(torch.tensor([1, 0, 1]), requires_grad=False))
    check_lowered(module, NCHW, ops, rng)


def test_a_second_input_shape_is_planned_with_its_own_sizes(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: x[:, 1:, -3:].transpose(1, 3).chunk(3, 1)[0])  # chunk's sizes depend on the input
    check_lowered(module, NCHW, ["slice", "transpose", "split"], rng, other_shape=(3, 5, 7, 9))


def test_negative_steps_and_gathers_are_refused_with_the_reason() -> None:
    """Without a sample input (torch itself refuses a negative step when it runs one)."""
    for function, words in ((lambda m, x: torch.relu(x)[:, ::-1], r"slicing with step -1 \(torch refuses steps below 1\)"),
                            (lambda m, x: x[:, m.index, 1:], "beside other indices"),
                            (lambda m, x: x[:, [0, -1]], "negative indices"),
                            (lambda m, x: x[m.index.float()], "a gather"),
                            (lambda m, x: x.repeat_interleave(m.index, dim=1), "repeats given as a tensor")):
        with pytest.raises(UnsupportedModelError, match=words):
            swap_backend(Fn(function, index=nn.Parameter(torch.tensor([0, 2]), requires_grad=False)).eval(), None)


def test_a_tuple_used_whole_is_left_to_pytorch_whole(rng: np.random.Generator) -> None:
    """By torch.fx; torch.export sees the tuple's items one by one, and the default tracing keeps its graph."""
    module = Fn(lambda m, x: torch.cat(x.chunk(2, dim=1), dim=3)).eval()
    model = swap_backend(module, None, NCHW, fallback="torch", tracer="torch.fx")
    row = next(row for row in model.explain() if row.implementation.startswith("torch"))
    assert "its tuple is used as a whole by 'cat'" in row.note
    x = random_input(rng, NCHW)
    torch.testing.assert_close(model(x), module(x), rtol=0, atol=0)
    exported = swap_backend(module, None, NCHW, fallback="torch")
    assert exported.tracer == "torch.export" and not any(r.implementation.startswith("torch") for r in exported.explain())
    torch.testing.assert_close(exported(x), module(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------- folding


def _guarded(m: Any, x: torch.Tensor) -> torch.Tensor:
    torch._assert(x.shape[1] == 4, "four channels")
    torch._assert(x.size(2) <= 8, "at most 8 rows")
    return x * 2


def test_shape_guards_are_checked_when_planning_each_input_shape(rng: np.random.Generator) -> None:
    model = check_lowered(Fn(_guarded), NCHW, ["mul_scalar"], rng, other_shape=(3, 4, 8, 2))
    assert [row.op for row in model.explain()] == ["mul_scalar"]  # the guards are no steps
    with pytest.raises(GraphError, match="the model's guard failed: four channels"):
        model(torch.randn(2, 3, 5, 6))
    with pytest.raises(ConversionError, match="at most 8 rows"):
        swap_backend(Fn(_guarded).eval(), None, (1, 4, 9, 2))


class _Defaults(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, scale: float = 2.0) -> torch.Tensor:
        return x * scale if mask is None else x * mask


def test_forward_arguments_with_defaults_are_traced_with_them(rng: np.random.Generator) -> None:
    model = check_lowered(_Defaults(), NCHW, ["mul_scalar"], rng)
    assert model.input_names == ["x"]
    with pytest.raises(TypeError, match=r"one shape per input \(x\); got 2"):
        model.plan(NCHW, NCHW)


def _bias_from_a_table(m: Any, x: torch.Tensor) -> torch.Tensor:
    bias = m.table[m.index.view(-1)].view(5, 6, -1).permute(2, 0, 1).unsqueeze(0)  # as maxvit and swin make theirs
    return x + bias


def test_values_made_from_weights_alone_are_folded_into_constants(rng: np.random.Generator) -> None:
    module = Fn(_bias_from_a_table, table=nn.Parameter(torch.randn(9, 4)), index=nn.Buffer(torch.randint(0, 9, (5, 6))))
    model = check_lowered(module, NCHW, ["add"], rng)
    assert [n.op for n in model.op_nodes()] == ["add"]


def test_modules_and_in_place_calls_on_weights_alone_are_folded_too(rng: np.random.Generator) -> None:
    mlp = nn.Sequential(nn.Linear(2, 8), nn.ReLU(inplace=True), nn.Linear(8, 6))  # as Swin V2's position-bias MLP
    module = Fn(lambda m, x: x + m.mlp(m.coords).sigmoid_(), mlp=mlp, coords=nn.Buffer(torch.randn(5, 2)))
    weights = [t.clone() for t in (*module.parameters(), *module.buffers())]
    model = check_lowered(module, NCHW, ["add"], rng)
    assert [n.op for n in model.op_nodes()] == ["add"]
    assert all(torch.equal(a, b) for a, b in zip(weights, (*module.parameters(), *module.buffers())))


def test_random_values_are_not_folded() -> None:
    module = Fn(lambda m, x: x + torch.randn_like(m.w), w=nn.Parameter(torch.zeros(6)))
    model = swap_backend(module.eval(), None, NCHW, fallback="torch")
    assert "randn_like" in [row.name for row in model.explain() if row.implementation.startswith("torch")]


# ---------------------------------------------------------------------------- torchvision's functions

needs_torchvision = pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                                       reason="torchvision is not installed (make setup-test installs it)")


def _torchvision() -> Any:
    from algoswap._zoo_foreign import import_library

    return import_library("torchvision")


@needs_torchvision
def test_stochastic_depth_in_eval_mode_is_the_identity(rng: np.random.Generator) -> None:
    ops = _torchvision().ops
    module = Fn(lambda m, x: m.depth(x) + ops.stochastic_depth(x, 0.5, "row", training=False), depth=ops.StochasticDepth(0.3, "batch"))
    model = check_lowered(module, NCHW, ["add"], rng)
    assert [n.op for n in model.op_nodes()] == ["add"]


@pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm is not installed (make setup-test installs it)")
def test_timm_drop_path_in_eval_mode_is_the_identity(rng: np.random.Generator) -> None:
    from algoswap._zoo_foreign import import_library

    drop = import_library("timm").layers.DropPath(0.4)
    model = check_lowered(Fn(lambda m, x: m.drop(x) * 2, drop=drop), NCHW, ["mul_scalar"], rng)
    assert [n.op for n in model.op_nodes()] == ["mul_scalar"]


@needs_torchvision
def test_swin_patch_merging(rng: np.random.Generator) -> None:
    swin = _torchvision().models.swin_transformer
    module = Fn(lambda m, x: swin._patch_merging_pad(x.permute(0, 2, 3, 1)))
    check_lowered(module, (2, 4, 5, 7), ["pad", "reshape", "transpose"], rng, other_shape=(1, 4, 6, 6))


@needs_torchvision
@pytest.mark.parametrize("shift, side", [(0, 8), (2, 8), (2, 7)], ids=["windows", "shifted windows", "padded"])
def test_swin_shifted_window_attention(shift: int, side: int, rng: np.random.Generator) -> None:
    swin = _torchvision().models.swin_transformer
    attention = swin.ShiftedWindowAttention(8, [4, 4], [shift, shift], num_heads=2)
    with torch.no_grad():
        attention.relative_position_bias_table.normal_()
    module = Fn(lambda m, x: m.attention(x.permute(0, 2, 3, 1)), attention=attention)
    model = check_lowered(module, (2, 8, side, side), ["scaled_dot_product_attention", "linear"], rng, reduction_length=9,
                          other_shape=(1, 8, side, side))
    if shift:
        assert "concat" in [row.op for row in model.explain()]  # the rolls
    with pytest.raises(GraphError, match=f"lowered for inputs of {side}x{side}"):
        model(torch.randn(1, 8, side + 4, side))
