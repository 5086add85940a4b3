"""What a node left to PyTorch returns is what torch returns (named tuples such as torch.return_types.max,
lists, dicts, nested tuples, Python numbers), and a node reading it (``.values``, ``.indices``, ``[0]``)
reads it as torch does; max and min over a dimension lower to ``reduce_max`` whose ``values`` are read so.
Each case is compared with the torch module in float32, with and without a sample input shape (without
one, nothing is known of a torch node's value until it runs)."""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import ConversionError, UnsupportedModelError  # noqa: E402
from algoswap.graph import GraphError  # noqa: E402
from helpers import assert_close  # noqa: E402
from lowering_check import Fn, check_lowered, random_input  # noqa: E402

SHAPE = (2, 3, 8, 8)
SAMPLES = pytest.mark.parametrize("sample", [SHAPE, None], ids=["sample", "no-sample"])


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _converted(function: Callable[..., Any], sample: Any, rng: np.random.Generator, **parts: Any) -> tuple[Any, Any, Any]:
    """The module (a conv2d ``m.c`` first, and ``parts``), its Model under fallback="torch", and both outputs
    on a fresh input (the Model's compared with torch's: the same structure, each array close)."""
    module = Fn(function, c=nn.Conv2d(3, 4, 3), **parts).eval()
    model = swap_backend(module, None, sample, fallback="torch")
    x = random_input(rng, SHAPE)
    with torch.no_grad():
        ref = module(x)
    out = model(x)
    assert type(out) is type(ref), f"the Model returned a {type(out).__name__}; torch returns a {type(ref).__name__}"
    rows = len(model.explain())
    for got, want in zip(_leaves(out), _leaves(ref), strict=True):
        assert_close(got, want, layers=rows, reduction_length=27)
    return module, model, out


def _torch_nodes(model: Any) -> list[str]:
    return [row.name for row in model.explain() if row.implementation.startswith("torch")]


# ---------------------------------------------------------------------------- named tuples of nodes left in torch

READ_IN_TORCH = {  # a forward reading a structure only torch computes, and the nodes left in torch
    "sort_values": (lambda m, x: m.c(x).sort(dim=-1).values, ["sort"]),
    "sort_item": (lambda m, x: m.c(x).sort()[0] + 1, ["sort"]),
    "topk_indices": (lambda m, x: torch.topk(m.c(x), 2).indices, ["topk"]),
    "median_values": (lambda m, x: m.c(x).median(dim=1).values * 2, ["median"]),
    "aminmax_max": (lambda m, x: torch.aminmax(m.c(x), dim=1).max, ["aminmax"]),
    "max_indices": (lambda m, x: m.c(x).max(dim=1).indices, ["max_1"]),  # argmax: the max node stays whole
    "lstm_hidden": (lambda m, x: m.lstm(m.c(x).flatten(2).transpose(1, 2))[1][0] + 1, ["lstm"]),  # (out, (h, c))
}


@SAMPLES
@pytest.mark.parametrize("case", sorted(READ_IN_TORCH))
def test_a_structure_torch_returns_is_read_as_torch_reads_it(case: str, sample: Any, rng: np.random.Generator) -> None:
    function, in_torch = READ_IN_TORCH[case]
    _, model, _ = _converted(function, sample, rng, lstm=nn.LSTM(4, 5, batch_first=True))
    assert _torch_nodes(model) == in_torch  # the reads of .values, .indices, [0] run no step in torch


@SAMPLES
def test_a_named_tuple_the_model_returns_keeps_its_type(sample: Any, rng: np.random.Generator) -> None:
    _, _, out = _converted(lambda m, x: m.c(x).max(dim=1), sample, rng)
    assert isinstance(out, torch.return_types.max) and out.values.shape == (2, 6, 6)


Pair = collections.namedtuple("Pair", ["low", "high"])


class _Sorted(nn.Module):
    """A submodule returning a dict (traced through: the forward reads it as Python)."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        ordered = x.sort(dim=-1)
        return {"values": ordered.values, "indices": ordered.indices}


@SAMPLES
def test_dicts_and_named_tuples_of_the_forward_keep_their_types(sample: Any, rng: np.random.Generator) -> None:
    _, _, out = _converted(lambda m, x: m.s(m.c(x)), sample, rng, s=_Sorted())
    assert list(out) == ["values", "indices"]
    _, _, out = _converted(lambda m, x: Pair(m.s(m.c(x))["values"][..., 0], m.c(x).amax(dim=(2, 3))), sample, rng, s=_Sorted())
    assert out._fields == ("low", "high")


# ---------------------------------------------------------------------------- max and min lowered


LOWERED = {
    "max_values": (lambda m, x: x.max(dim=1).values, ["reduce_max"]),
    "torch_max_item": (lambda m, x: torch.max(x, 1)[0] * 2, ["reduce_max", "mul_scalar"]),
    "min_keepdim": (lambda m, x: x - x.min(dim=1, keepdim=True)[0], ["neg", "reduce_max", "sub"]),
    "min_values": (lambda m, x: torch.min(x, dim=-1).values, ["neg", "reduce_max"]),
    "amax_amin": (lambda m, x: torch.amax(x, (2, 3)) + x.amin(dim=-1).sum(-1), ["reduce_max", "neg", "reduce_sum", "add"]),
    "whole": (lambda m, x: x * x.amax() - torch.min(x), ["reduce_max", "mul", "neg", "sub"]),
}


@pytest.mark.parametrize("case", sorted(LOWERED))
def test_max_and_min_over_a_dim_run_with_no_fallback(case: str, rng: np.random.Generator) -> None:
    function, ops = LOWERED[case]
    check_lowered(Fn(function), (2, 4, 5, 6), ops, rng, reduction_length=30)


def test_named_tuples_of_weights_alone_are_folded_into_constants(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: x + m.w.max(dim=0).values + m.w.sort(dim=0)[0][0], w=nn.Parameter(torch.randn(3, 6)))
    model = check_lowered(module, (2, 6), ["add"], rng)
    assert [n.op for n in model.op_nodes()] == ["add", "add"]


def test_max_values_read_by_name_or_index_lower_whole(rng: np.random.Generator) -> None:
    for function in (lambda m, x: m.c(x).max(dim=1).values, lambda m, x: torch.max(m.c(x), 1)[0]):
        _, model, _ = _converted(function, SHAPE, rng)
        assert model.op_counts() == {"conv2d": 1, "reduce_max": 1}


def test_reading_the_indices_of_max_leaves_it_to_pytorch_with_the_reason() -> None:
    with pytest.raises(UnsupportedModelError, match=r"its indices are read \(argmax\), which no registry op computes"):
        swap_backend(Fn(lambda m, x: x.max(dim=1).indices).eval(), None, SHAPE)
    with pytest.raises(UnsupportedModelError, match=r"max with a second argument .*: only one literal dimension is lowered"):
        swap_backend(Fn(lambda m, x: torch.max(x, x.flip(0))).eval(), None, SHAPE)


# ---------------------------------------------------------------------------- Python numbers torch computes


NUMBERS = {  # a number from data (x.item()) is known only when the model runs; the op reading it runs in torch
    "arithmetic": (lambda m, x: x * (x.max().item() * 2 + 1), "mul_1"),  # was planned with the zeros' 0 * 2 + 1
    "divisor": (lambda m, x: x / x.abs().max().item(), "truediv"),  # was refused: the zeros' 0 divides
}


@SAMPLES
@pytest.mark.parametrize("case", sorted(NUMBERS))
def test_numbers_torch_computes_from_data_are_computed_at_each_call(case: str, sample: Any, rng: np.random.Generator) -> None:
    function, reader = NUMBERS[case]
    module = Fn(function).eval()
    model = swap_backend(module, None, (2, 3) if sample else None, fallback="torch")
    for scale in (1.0, 100.0):  # a value computed when planning would serve both calls the same number
        x = random_input(rng, (2, 3)) * scale
        assert_close(model(x), module(x), layers=len(model.explain()))
    note = {row.name: row.note for row in model.explain()}[reader]
    assert "computed at each call" in note, note


class _Guarded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert(x.max().item() < 10, "values below 10")
        return x * 2


def test_a_guard_on_a_number_torch_computes_is_checked_at_each_call(rng: np.random.Generator) -> None:
    model = swap_backend(_Guarded().eval(), None, (2, 3), fallback="torch")
    x = random_input(rng, (2, 3)).clamp(-1, 1)
    assert_close(model(x), x * 2)
    with pytest.raises(GraphError, match="values below 10"):
        model(x + 20)


def test_a_loop_over_a_tuple_says_to_unpack_it(rng: np.random.Generator) -> None:
    """torch.fx says how to make it traceable; torch.export (given a sample shape) captures it as it is."""
    looped = Fn(lambda m, x: torch.cat([p * 2 for p in torch.split(x, 2, dim=1)], 1)).eval()
    with pytest.raises(ConversionError, match=r"unpack it \(a, b = torch.split"):
        swap_backend(looped, None, (2, 4, 5, 6), fallback="torch", tracer="torch.fx")
    with pytest.raises(ConversionError, match=r"unpack it \(a, b = torch.split.*give a sample_input_shape"):
        swap_backend(looped, fallback="torch")
    exported = swap_backend(looped, None, (2, 4, 5, 6))
    assert exported.tracer == "torch.export"
    x = random_input(rng, (2, 4, 5, 6))
    assert_close(exported(x), x * 2)

    def unpacked(m: Any, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(x, 2, dim=1)
        return torch.cat([p * 2 for p in (a, b)], 1)

    check_lowered(Fn(unpacked), (2, 4, 5, 6), ["split", "mul_scalar", "concat"], rng)
