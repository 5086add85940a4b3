"""swap_backend lowers arithmetic, activations, softmax, reductions, layer norm, matrix products and
attention onto registry ops (each case: a small module against PyTorch, explain() naming the ops)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import UnsupportedModelError  # noqa: E402
from algoswap._torch.lower_in_place import InPlaceError  # noqa: E402
from helpers import assert_close  # noqa: E402
from lowering_check import Fn, check_lowered, random_input, requires_ops  # noqa: E402

NCHW = (2, 4, 5, 6)

# ---------------------------------------------------------------------------- arithmetic


def test_squeeze_and_excitation_gate_broadcasts(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: x * torch.sigmoid(x.mean((2, 3), keepdim=True)))
    check_lowered(module, NCHW, ["reduce_mean", "sigmoid", "mul"], rng, reduction_length=30)


def _scalars(m: Any, x: torch.Tensor) -> torch.Tensor:
    y = (x - 1.5) / 4
    z = 1 - x
    w = 2.0 / (x * x + 1.0)
    return torch.sub(y * 3 + z - w, x, alpha=2) - torch.rsub(x, 0.5) + x ** 2 + (-x)


def test_python_numbers_become_scalar_ops(rng: np.random.Generator) -> None:
    model = check_lowered(Fn(_scalars), NCHW, ["add_scalar", "mul_scalar", "neg", "rdiv_scalar", "sub", "add", "mul", "pow_scalar"], rng)
    assert all(i is None or i.kind != "constant" for n in model.op_nodes() for i in n.inputs)  # no number became an array


def test_sizes_computed_in_forward_scale_tensors(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: x * x.shape[-1] ** -0.5 / x.size(1) + x.size(2))  # numbers known when planning
    model = check_lowered(module, NCHW, ["mul_scalar", "add_scalar"], rng, other_shape=(2, 3, 4, 7))
    assert [n for n in model.op_nodes() if n.needs]


def _in_place(m: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x)
    y += x
    y *= 2
    y = y.div_(3)
    return y.sub_(x.sigmoid())


def test_in_place_forms_whose_old_value_is_not_read_again(rng: np.random.Generator) -> None:
    check_lowered(Fn(_in_place), NCHW, ["relu", "add", "mul_scalar", "sigmoid", "sub"], rng)


def _read_after_change(m: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x)
    y.add_(1)  # changes y; the lines below read the changed y under its old name
    F.relu(y, True)  # F.relu(y, inplace=True), positionally
    return y * 2 + y


def test_in_place_changes_read_under_the_old_name(rng: np.random.Generator) -> None:
    check_lowered(Fn(_read_after_change), NCHW, ["relu", "add_scalar", "mul_scalar", "add"], rng)


def _through_a_view(m: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x)
    flat = y.view(-1)
    y.mul_(2)  # changes flat too
    return flat + 1


def test_in_place_changes_seen_through_a_view_or_kept_across_calls_are_refused() -> None:
    with pytest.raises(InPlaceError, match="changes 'relu' in place, and 'view', which shares its memory, is read afterwards"):
        swap_backend(Fn(_through_a_view).eval(), fallback="torch")
    counter = Fn(lambda m, x: x + m.calls.add_(1), calls=nn.Parameter(torch.zeros(1), requires_grad=False))
    with pytest.raises(InPlaceError, match="changes the model's weight 'calls' in place at every call"):
        swap_backend(counter.eval(), fallback="torch")


# ---------------------------------------------------------------------------- activations

ACTIVATIONS: list[tuple[str, Any, str]] = [
    ("Sigmoid", nn.Sigmoid(), "sigmoid"), ("Tensor.sigmoid", lambda x: x.sigmoid(), "sigmoid"),
    ("Tanh", nn.Tanh(), "tanh"), ("torch.tanh", torch.tanh, "tanh"), ("Tensor.tanh_", lambda x: (x * 1).tanh_(), "tanh"),
    ("LeakyReLU", nn.LeakyReLU(0.2), "leaky_relu"), ("F.leaky_relu", lambda x: F.leaky_relu(x, 0.3), "leaky_relu"),
    ("ReLU6", nn.ReLU6(), "hardtanh"), ("F.relu6", F.relu6, "hardtanh"), ("Hardtanh", nn.Hardtanh(-0.5, 1.5), "hardtanh"),
    ("F.hardtanh", lambda x: F.hardtanh(x, -2.0, 0.5), "hardtanh"),
    ("SiLU", nn.SiLU(inplace=True), "silu"), ("F.silu", F.silu, "silu"),
    ("GELU", nn.GELU(), "gelu"), ("GELU tanh", nn.GELU("tanh"), "gelu"),
    ("F.gelu tanh", lambda x: F.gelu(x, approximate="tanh"), "gelu"),
    ("Hardswish", nn.Hardswish(), "hardswish"), ("F.hardswish", F.hardswish, "hardswish"),
    ("Hardsigmoid", nn.Hardsigmoid(), "hardsigmoid"), ("F.hardsigmoid", F.hardsigmoid, "hardsigmoid"),
    ("ELU", nn.ELU(0.5), "elu"), ("F.elu", lambda x: F.elu(x, alpha=2.0), "elu"),
    ("Mish", nn.Mish(), "mish"), ("F.mish", F.mish, "mish"),
]


@pytest.mark.parametrize("activation, op", [(a, op) for _, a, op in ACTIVATIONS], ids=[name for name, _, _ in ACTIVATIONS])
def test_activation(activation: Any, op: str, rng: np.random.Generator) -> None:
    parts = {"act": activation} if isinstance(activation, nn.Module) else {}
    module = Fn((lambda m, x: m.act(x * 3)) if parts else (lambda m, x: activation(x * 3)), **parts)
    check_lowered(module, NCHW, [op], rng)


def test_activation_attributes_reach_the_op() -> None:
    requires_ops("hardtanh", "gelu", "elu")
    model = swap_backend(Fn(lambda m, x: F.elu(F.gelu(F.relu6(m.act(x)), approximate="tanh"), 0.5), act=nn.Hardtanh(-2, 3)).eval())
    attrs = [dict(n.attrs) for n in model.op_nodes()]
    assert attrs == [{"min_val": -2, "max_val": 3}, {"min_val": 0.0, "max_val": 6.0}, {"approximate": "tanh"}, {"alpha": 0.5}]


# ---------------------------------------------------------------------------- softmax and reductions

SOFTMAXES = [
    ("Softmax", nn.Softmax(dim=1), "softmax"), ("F.softmax", lambda x: F.softmax(x, dim=-1), "softmax"),
    ("Tensor.softmax", lambda x: x.softmax(2), "softmax"), ("torch.log_softmax", lambda x: torch.log_softmax(x, -1), "log_softmax"),
    ("LogSoftmax", nn.LogSoftmax(dim=-2), "log_softmax"),
]


@pytest.mark.parametrize("function, op", [(f, op) for _, f, op in SOFTMAXES], ids=[name for name, _, _ in SOFTMAXES])
def test_softmax(function: Any, op: str, rng: np.random.Generator) -> None:
    parts = {"act": function} if isinstance(function, nn.Module) else {}
    module = Fn((lambda m, x: m.act(x)) if parts else (lambda m, x: function(x)), **parts)
    check_lowered(module, NCHW, [op], rng, reduction_length=6)


def test_softmax_without_dim_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="Softmax without dim"):
        swap_backend(Fn(lambda m, x: m.act(x), act=nn.Softmax()).eval())


REDUCTIONS = [
    ("Tensor.mean keepdim", lambda x: x.mean((2, 3), keepdim=True), "reduce_mean", 30),
    ("torch.mean", lambda x: torch.mean(x, dim=1), "reduce_mean", 4),
    ("Tensor.mean all", lambda x: x.mean(), "reduce_mean", 240),
    ("Tensor.sum", lambda x: x.sum(-1), "reduce_sum", 6),
    ("torch.sum list", lambda x: torch.sum(x, [1, -2], keepdim=True), "reduce_sum", 20),
]


@pytest.mark.parametrize("function, op, n", [c[1:] for c in REDUCTIONS], ids=[c[0] for c in REDUCTIONS])
def test_reduction(function: Any, op: str, n: int, rng: np.random.Generator) -> None:
    check_lowered(Fn(lambda m, x: function(x)), NCHW, [op], rng, reduction_length=n, scale=lambda x: function(x.abs()))


# ---------------------------------------------------------------------------- normalisation


def _conv_bn_act(m: Any, x: torch.Tensor) -> torch.Tensor:
    y = m.conv(x)
    torch._assert(y.ndim == 4, "expected a 4-D input")  # as timm's BatchNormAct2d
    bn = m.bn
    return F.batch_norm(y, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.1, bn.eps)


def test_a_functional_batch_norm_after_a_shape_check_is_folded(rng: np.random.Generator) -> None:
    module = Fn(_conv_bn_act, conv=nn.Conv2d(4, 3, 3), bn=nn.BatchNorm2d(3))
    with torch.no_grad():
        module.bn.running_var.uniform_(0.5, 2.0)
        module.bn.running_mean.uniform_(-1, 1)
    model = check_lowered(module, NCHW, ["conv2d"], rng, reduction_length=37)
    assert model.folded_batchnorms == ["batch_norm"] and "batchnorm2d" not in model.op_counts()


# ---------------------------------------------------------------------------- layer norm


def test_layer_norm_module_over_channels_last_as_convnext(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: m.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), norm=nn.LayerNorm(4, eps=1e-6))
    with torch.no_grad():
        module.norm.weight.uniform_(0.5, 1.5)
        module.norm.bias.uniform_(-0.5, 0.5)
    model = check_lowered(module, NCHW, ["transpose", "layer_norm"], rng, reduction_length=4)
    assert next(n for n in model.op_nodes() if n.op == "layer_norm").attrs == {"normalized_ndim": 1, "eps": 1e-6}


def test_layer_norm_function_over_sizes_computed_in_forward(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: F.layer_norm(x, x.shape[-2:]) + m.norm(x))
    module.norm = nn.LayerNorm((5, 6), elementwise_affine=False)
    check_lowered(module, NCHW, ["layer_norm", "add"], rng, reduction_length=30)


@pytest.mark.parametrize("dim", [-1, 1])
def test_normalize_is_the_norm_floored_at_eps(dim: int, rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: F.normalize(x, dim=dim, eps=1e-3))
    model = check_lowered(module, NCHW, ["mul", "reduce_sum", "sqrt", "clamp_min", "div"], rng, reduction_length=6)
    x = random_input(rng, NCHW)
    x[0] = 0  # vectors of zeros: their norm is floored at eps, and they stay zeros (not 0 / 0)
    x[1] *= 1e-4  # norms below eps: divided by eps
    assert_close(model(x), module(x), layers=5, reduction_length=6)


def test_normalize_other_than_p2_is_left_to_torch() -> None:
    with pytest.raises(UnsupportedModelError, match="only p=2"):
        swap_backend(Fn(lambda m, x: F.normalize(x, p=1.0, dim=-1)).eval(), None, NCHW)


# ---------------------------------------------------------------------------- matrix products


def _weights(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape) * 0.3)


PRODUCTS = [
    ("x @ x^T", lambda m, x: x @ x.transpose(-2, -1), ["batch_matmul"], 6),
    ("x^T @ x", lambda m, x: torch.matmul(x.mT, x), ["batch_matmul"], 5),
    ("bmm", lambda m, x: torch.bmm(x.flatten(0, 1), x.flatten(0, 1).transpose(1, 2)), ["batch_matmul"], 6),
    ("N-D @ weight", lambda m, x: x @ m.w, ["batch_matmul"], 6),
    ("matrices", lambda m, x: x.flatten(1) @ m.v, ["matmul"], 120),
    ("einsum attention scores", lambda m, x: torch.einsum("b h i d, b h j d -> b h i j", x, x), ["batch_matmul"], 6),
    ("einsum attention values", lambda m, x: torch.einsum("bhij,bhjd->bhid", x.transpose(-2, -1) @ x, x.transpose(-2, -1)),
     ["batch_matmul"], 30),
    ("einsum permuted output", lambda m, x: torch.einsum("bcij,bcjk->bkci", x, x.transpose(2, 3)), ["batch_matmul", "transpose"], 6),
    ("einsum matrices", lambda m, x: torch.einsum("ij,kj->ik", x.flatten(1), x.flatten(1)), ["matmul"], 120),
]


@pytest.mark.parametrize("function, ops, n", [c[1:] for c in PRODUCTS], ids=[c[0] for c in PRODUCTS])
def test_matrix_product(function: Any, ops: list[str], n: int, rng: np.random.Generator) -> None:
    module = Fn(function, w=_weights(6, 3), v=_weights(120, 2))
    check_lowered(module, NCHW, ops, rng, reduction_length=n, other_shape=(3, 4, 5, 6))


def test_transpose_feeding_a_product_alone_is_a_flag_not_a_copy() -> None:
    model = swap_backend(Fn(lambda m, x: x @ x.transpose(-2, -1)).eval(), None, NCHW)
    assert [(n.op, n.attrs) for n in model.op_nodes() if n.op == "batch_matmul"] == [("batch_matmul", {"trans_a": False, "trans_b": True})]
    assert "transpose" not in [row.op for row in model.explain()]


def test_products_that_are_not_one_matmul_are_refused_with_the_reason() -> None:
    for function, words in ((lambda m, x: torch.einsum("bcii->bci", x), "einsum 'bcii->bci' of 1 operands"),
                            (lambda m, x: torch.einsum("bcij,bcjk->bc", x, x), "is not one (batched) matrix product"),
                            (lambda m, x: x.flatten() @ x.flatten(), "a matrix product with a 1-D operand")):
        with pytest.raises(UnsupportedModelError, match=words.replace("(", r"\(").replace(")", r"\)")):
            swap_backend(Fn(function).eval(), None, (2, 4, 6, 6))
    with pytest.raises(UnsupportedModelError, match="known only with a sample_input_shape"):
        swap_backend(Fn(lambda m, x: x @ x).eval())


# ---------------------------------------------------------------------------- attention


ATTENTIONS = [  # x: (batch, heads, length, head size)
    ("plain", lambda m, x: F.scaled_dot_product_attention(x, x * 2, x + 1)),
    ("causal and scaled", lambda m, x: F.scaled_dot_product_attention(x, x, x.relu(), is_causal=True, scale=0.3)),
]


@pytest.mark.parametrize("function", [c[1] for c in ATTENTIONS], ids=[c[0] for c in ATTENTIONS])
def test_scaled_dot_product_attention(function: Any, rng: np.random.Generator) -> None:
    check_lowered(Fn(function), (2, 2, 5, 6), ["scaled_dot_product_attention"], rng, reduction_length=6, other_shape=(1, 2, 7, 6))


def test_attention_dropout_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="dropout_p=0.1"):
        swap_backend(Fn(lambda m, x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)).eval())


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kdim", [None, 6])
def test_multihead_attention(batch_first: bool, kdim: int | None, rng: np.random.Generator) -> None:
    attention = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=kdim, vdim=kdim)

    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        tokens = x.flatten(2)  # (N, 8, 6): 8 channels as the embedding, or 6 features as key and value
        query = tokens.transpose(1, 2) @ m.w  # (N, 6, 8)
        key = tokens if kdim else query  # (N, 8, 6): 8 keys of 6 features
        query, key = (query, key) if batch_first else (query.transpose(0, 1), key.transpose(0, 1))
        out, _ = m.attention(query, key, key, need_weights=False)
        return out

    module = Fn(forward, attention=attention, w=_weights(8, 8))
    check_lowered(module, (2, 8, 2, 3), ["linear", "scaled_dot_product_attention", "transpose", "reshape"], rng, reduction_length=9)


def test_multihead_attention_weights_read_are_refused_by_fx_and_exported(rng: np.random.Generator) -> None:
    """Reading the weights is no sdpa: torch.fx refuses the module; torch.export captures its ops one by one."""
    module = Fn(lambda m, x: m.attention(x, x, x)[1], attention=nn.MultiheadAttention(6, 2, batch_first=True)).eval()
    with pytest.raises(UnsupportedModelError, match="attention weights are read"):
        swap_backend(module, None, (2, 5, 6), tracer="torch.fx")
    model = swap_backend(module, None, (2, 5, 6))
    assert model.tracer == "torch.export"
    x = random_input(rng, (2, 5, 6))
    with torch.no_grad():
        assert_close(model(x), module(x))
