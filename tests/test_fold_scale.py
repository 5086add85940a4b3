"""swap_backend folds a constant per-feature scale after a linear (ConvNeXt's layer scale) into the
linear's weights: one step less per block, the same numbers as PyTorch; and leaves every other mul alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from lowering_check import Fn, check_lowered  # noqa: E402

NCHW = (2, 6, 5, 4)
C = NCHW[1]


def _gamma(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.rand(*shape) + 0.5)


def _block(scale: Any) -> Any:
    """ConvNeXt's channels-last MLP: permute to NHWC, linear, permute back, then ``scale(m, y)``."""
    return lambda m, x: scale(m, m.fc(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)) + x


FOLDED = [
    ("torchvision: gamma (C, 1, 1) * y", _block(lambda m, y: m.gamma * y), (C, 1, 1)),
    ("timm: y.mul(gamma.reshape(1, -1, 1, 1))", _block(lambda m, y: y.mul(m.gamma.reshape(1, -1, 1, 1))), (C,)),
    ("no permute: linear(x) * gamma (C,)", lambda m, x: m.fc(x.permute(0, 2, 3, 1)) * m.gamma, (C,)),
    ("a scalar weight", _block(lambda m, y: y * m.gamma), (1, 1, 1, 1)),
    ("timm's Mlp: a dropout after the linear",
     lambda m, x: m.drop(m.fc(x.permute(0, 2, 3, 1))).permute(0, 3, 1, 2).mul(m.gamma.reshape(1, -1, 1, 1)) + x, (C,)),
]


@pytest.mark.parametrize("case", FOLDED, ids=[c[0] for c in FOLDED])
def test_a_constant_scale_of_the_features_is_folded_into_the_linear(case: Any, rng: np.random.Generator) -> None:
    _, forward, shape = case
    module = Fn(forward, fc=nn.Linear(C, C), gamma=_gamma(*shape), drop=nn.Dropout(0.1))
    model = check_lowered(module, NCHW, ["linear"], rng, reduction_length=C + 1)
    assert len(model.folded_scales) == 1 and "mul" not in model.op_counts(), model.op_counts()
    linear = next(row for row in model.explain() if row.op == "linear")
    assert "folded into the weights" in linear.note


def test_a_linear_without_bias_is_scaled_too(rng: np.random.Generator) -> None:
    module = Fn(_block(lambda m, y: m.gamma * y), fc=nn.Linear(C, C, bias=False), gamma=_gamma(C, 1, 1))
    model = check_lowered(module, NCHW, ["linear"], rng, reduction_length=C)
    assert len(model.folded_scales) == 1 and "mul" not in model.op_counts()


NOT_FOLDED = [
    ("a scale computed from the input", _block(lambda m, y: y * y.mean((2, 3), keepdim=True)), (C, 1, 1)),
    ("a scale along H, not the features", _block(lambda m, y: m.gamma * y), (NCHW[2], 1)),
    ("a scale along the features and H", _block(lambda m, y: m.gamma * y), (C, NCHW[2], 1)),
    ("a scale that adds a dimension", lambda m, x: m.fc(x.permute(0, 2, 3, 1)) * m.gamma, (1, 1, 1, 1, C)),
    ("the linear's output read twice", _block(lambda m, y: m.gamma * y + y), (C, 1, 1)),
    ("a permute of a non-linear", lambda m, x: (x.permute(0, 2, 3, 1) * m.gamma), (C,)),
]


@pytest.mark.parametrize("case", NOT_FOLDED, ids=[c[0] for c in NOT_FOLDED])
def test_other_muls_are_left_as_they_are(case: Any, rng: np.random.Generator) -> None:
    _, forward, shape = case
    module = Fn(forward, fc=nn.Linear(C, C), gamma=_gamma(*shape))
    model = check_lowered(module, NCHW, ["mul"], rng, reduction_length=C + 1)
    assert model.folded_scales == []


def test_the_torch_model_is_left_unchanged(rng: np.random.Generator) -> None:
    module = Fn(_block(lambda m, y: m.gamma * y), fc=nn.Linear(C, C), gamma=_gamma(C, 1, 1))
    before = {k: v.clone() for k, v in module.state_dict().items()}
    check_lowered(module, NCHW, ["linear"], rng, reduction_length=C + 1)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
