"""swap_backend lowers the normalisations timm's newer families use: group norm (F.group_norm, nn.GroupNorm and
timm's GroupNorm / GroupNorm1 subclasses, traced through), batch norm of rank 2, 3 and 5 (nn.BatchNorm1d/3d,
F.batch_norm) onto batchnorm2d through two reshapes, 2-norms over dimensions (Tensor.norm, torch.norm,
torch.linalg.vector_norm / norm: a global response norm) and torch.addcmul; then three timm models whole."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from algoswap import zoo  # noqa: E402
from algoswap._zoo_foreign import import_library  # noqa: E402
from algoswap._torch.convert import swap_backend  # noqa: E402
from helpers import assert_close, network_terms, relative_error  # noqa: E402
from lowering_check import Fn, check_lowered, random_input  # noqa: E402

NCHW = (2, 6, 5, 4)


def _trained(module: nn.Module, seed: int = 0) -> nn.Module:
    """``module`` with random affine parameters and (batch norms) running statistics, so none is the identity."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if tensor.dtype.is_floating_point:
                tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
    return module


# ---------------------------------------------------------------------------- group norm


@pytest.mark.parametrize("groups", [1, 3, 6])
def test_group_norm_module(groups: int, rng: np.random.Generator) -> None:
    module = _trained(nn.GroupNorm(groups, 6, eps=1e-3))
    model = check_lowered(module, NCHW, ["group_norm"], rng, reduction_length=6 * 20 // groups)
    assert next(n for n in model.op_nodes() if n.op == "group_norm").attrs == {"num_groups": groups, "eps": 1e-3}


def test_group_norm_function_without_affine_on_a_sequence(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: F.group_norm(x, 2) + F.group_norm(x, 3, m.weight, m.bias, 1e-4),
                weight=nn.Parameter(torch.rand(6) + 0.5), bias=nn.Parameter(torch.rand(6)))
    check_lowered(module, (2, 6, 7), ["group_norm", "add"], rng, reduction_length=21)


def test_timm_group_norm_subclasses_trace_to_group_norm(rng: np.random.Generator) -> None:
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (make setup-test installs it)")
    layers = import_library("timm").layers
    module = Fn(lambda m, x: m.one(x) + m.two(x), one=_trained(layers.GroupNorm1(6)), two=_trained(layers.GroupNorm(6, 2)))
    check_lowered(module, NCHW, ["group_norm", "add"], rng, reduction_length=120)


# ---------------------------------------------------------------------------- batch norm of other ranks


@pytest.mark.parametrize("shape", [(3, 6), (3, 6, 7)])
def test_batch_norm_1d_module_runs_as_batchnorm2d(shape: tuple[int, ...], rng: np.random.Generator) -> None:
    model = check_lowered(nn.Sequential(_trained(nn.BatchNorm1d(6))), shape, ["reshape", "batchnorm2d"], rng)
    assert [n.op for n in model.op_nodes()] == ["reshape", "batchnorm2d", "reshape"]


def test_batch_norm_3d_module_and_the_function_on_a_sequence(rng: np.random.Generator) -> None:
    check_lowered(nn.Sequential(_trained(nn.BatchNorm3d(6))), (2, 6, 3, 4, 2), ["batchnorm2d"], rng)
    norm = _trained(nn.BatchNorm1d(6))
    module = Fn(lambda m, x: F.batch_norm(x, m.norm.running_mean, m.norm.running_var, m.norm.weight, m.norm.bias, eps=1e-3),
                norm=norm)
    check_lowered(module, (2, 6, 7), ["batchnorm2d"], rng)


def test_batch_norm_on_flattened_tokens_as_levit(rng: np.random.Generator) -> None:
    """LeViT's LinearNorm: a linear, then BatchNorm1d over (B * N, C), reshaped back."""
    module = Fn(lambda m, x: m.bn(m.linear(x).flatten(0, 1)).reshape_as(m.linear(x)),
                linear=nn.Linear(6, 8), bn=_trained(nn.BatchNorm1d(8)))
    check_lowered(module, (2, 5, 6), ["linear", "batchnorm2d"], rng, reduction_length=6)


def test_batch_norm_2d_is_still_one_op_and_folds_into_its_convolution(rng: np.random.Generator) -> None:
    module = nn.Sequential(nn.Conv2d(6, 4, 3), _trained(nn.BatchNorm2d(4)))
    model = check_lowered(module, NCHW, ["conv2d"], rng, reduction_length=54)
    assert [n.op for n in model.op_nodes()] == ["conv2d"]


def test_batch_norm_in_training_mode_is_left_to_torch() -> None:
    module = Fn(lambda m, x: F.batch_norm(x, None, None, training=True))
    rows = swap_backend(module.eval(), None, (3, 6), fallback="torch").explain()
    assert [row.implementation for row in rows] == ["torch (fallback)"] and "training=True" in rows[0].note


# ---------------------------------------------------------------------------- 2-norms over dimensions


_NORMS = {
    "Tensor.norm": lambda m, x: x.norm(p=2, dim=(2, 3), keepdim=True),
    "Tensor.norm default": lambda m, x: x.norm(dim=1),
    "torch.norm": lambda m, x: torch.norm(x, 2, -1),
    "vector_norm": lambda m, x: torch.linalg.vector_norm(x, dim=(1, 2)),
    "vector_norm of all": lambda m, x: torch.linalg.vector_norm(x).reshape(1) + x.flatten(1)[:, 0],
    "linalg.norm over one dim": lambda m, x: torch.linalg.norm(x, 2, dim=1, keepdim=True),
    "linalg.norm default": lambda m, x: torch.linalg.norm(x, dim=(2, 3)),
}


@pytest.mark.parametrize("name", sorted(_NORMS))
def test_two_norms_over_dimensions(name: str, rng: np.random.Generator) -> None:
    check_lowered(Fn(_NORMS[name]), NCHW, ["mul", "reduce_sum", "sqrt"], rng, reduction_length=120)


@pytest.mark.parametrize("fn, words", [
    (lambda m, x: x.norm(p=1, dim=1), "order 1"),
    (lambda m, x: torch.linalg.vector_norm(x, ord=float("inf"), dim=1), "order inf"),
    (lambda m, x: torch.linalg.norm(x, 2, dim=(2, 3)), "largest singular value"),
    (lambda m, x: torch.norm(x, dim=1, dtype=torch.float64).float(), "dtype"),
])
def test_other_norms_are_left_to_torch_with_the_reason(fn: Any, words: str) -> None:
    rows = swap_backend(Fn(fn).eval(), None, NCHW, fallback="torch").explain()
    assert any(row.implementation.startswith("torch") and words in row.note for row in rows), rows


def test_norms_keep_nan_and_inf_as_torch(rng: np.random.Generator) -> None:
    """inf (of either sign) gives inf, NaN gives NaN, and squares overflowing float32 give inf, as in torch."""
    model = swap_backend(Fn(lambda m, x: x.norm(p=2, dim=-1)).eval(), None, (4, 3))
    x = torch.tensor([[np.inf, 1, 2], [1, -np.inf, 0], [np.nan, 1, 1], [1e20, 1, 0]], dtype=torch.float32)
    out, ref = model(x), x.norm(p=2, dim=-1)
    assert torch.equal(torch.isnan(out), torch.isnan(ref)) and torch.equal(out[~torch.isnan(out)], ref[~torch.isnan(ref)])
    assert out[:2].isinf().all() and out[2].isnan() and out[3].isinf()


# ---------------------------------------------------------------------------- a global response norm


def _global_response_norm(m: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's GlobalResponseNorm (ConvNeXt V2) on NHWC activations."""
    x_g = x.norm(p=2, dim=(1, 2), keepdim=True)
    x_n = x_g / (x_g.mean(dim=-1, keepdim=True) + 1e-6)
    return x + torch.addcmul(m.bias.view(1, 1, 1, -1), m.weight.view(1, 1, 1, -1), x * x_n)


def test_global_response_norm_with_addcmul(rng: np.random.Generator) -> None:
    module = Fn(_global_response_norm, weight=nn.Parameter(torch.rand(4) + 0.5), bias=nn.Parameter(torch.rand(4)))
    check_lowered(module, (2, 5, 6, 4), ["reduce_sum", "sqrt", "reduce_mean", "mul", "add"], rng, reduction_length=34)


def test_addcmul_with_a_value_scales_the_first_tensor_as_torch(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: x.addcmul(x, torch.sigmoid(x), value=0.5))
    check_lowered(module, NCHW, ["mul_scalar", "mul", "add"], rng)


# ---------------------------------------------------------------------------- timm models whole


@pytest.mark.slow
@pytest.mark.parametrize("name", ["timm:poolformer_s12", "timm:convnextv2_atto", "timm:repvit_m1"])
def test_timm_models_convert_with_nothing_left_to_torch(name: str, rng: np.random.Generator) -> None:
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (make setup-test installs it)")
    module = zoo.build(name)
    shape = zoo.input_shape(name, 2, small=True)
    model = swap_backend(module, None, shape, fallback="torch")
    left = [f"{row.name}: {row.note}" for row in model.explain() if row.implementation.startswith("torch")]
    assert not left, "\n".join(left)
    x = random_input(rng, shape)
    with torch.no_grad():
        ref = module(x)
    out = model(x)
    assert relative_error(out, ref) <= 1e-5
    assert_close(out, ref, **network_terms(module))
