"""The NumPy reference kernels of the operator set (arithmetic, matmul, reductions, slicing,
indexing, instance norm, dropout, losses, CSR products, optimizer updates) against PyTorch: every
forward op on its conformance cases (the ops of tests/torch_oracle.py), and every gradient rule
against torch autograd. Dropout, whose mask is ours, is also checked for its defining properties."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import algoswap  # noqa: E402
from helpers import assert_close  # noqa: E402
from algoswap.testing._cases import FORWARD, OPTIMIZER_ATTRS, Arg, draw, reference_name  # noqa: E402
from algoswap.testing._cases_ops import OPS_FORWARD  # noqa: E402
from algoswap.testing._scales import update_scale  # noqa: E402
from helpers import assert_op_close  # noqa: E402
from torch_oracle import TORCH, to_torch  # noqa: E402

CASES = [(op, i, dtype) for op in ("add", *OPS_FORWARD) if op in TORCH for i in range(len(FORWARD[op])) for dtype in ("float32", "float64")]


@pytest.mark.parametrize("op, index, dtype", CASES, ids=[f"{op}-{i}-{d}" for op, i, d in CASES])
def test_forward_and_gradients_match_torch(rng, op, index, dtype):
    shapes, attrs = FORWARD[op][index]
    spec = algoswap.registry().spec(op)
    inputs = [draw(rng, s, dtype) for s in shapes]
    wanted = {rule.wrt for rule in spec.gradients}
    tensors = [to_torch(a, name in wanted) for name, a in zip(spec.input_names, inputs)]
    expected = TORCH[op](*tensors, **attrs)
    out = algoswap.ops.call(op, *inputs, algorithm=reference_name(op), **attrs)
    assert out.shape == tuple(expected.shape)
    assert_op_close(op, out, expected, inputs, attrs)
    if not wanted:
        return
    dy = np.asarray(rng.standard_normal(out.shape)).astype(dtype)
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    call = spec.bind([getattr(a, "shape", None) for a in inputs], [None if a is None else str(a.dtype) for a in inputs], attrs)
    by_name = dict(zip(spec.input_names, inputs), grad_output=dy, output=out)
    for rule in spec.gradients:
        tensor = tensors[spec.input_names.index(rule.wrt)]
        if tensor is None:
            continue
        if rule.op is None:
            got = dy.reshape(tensor.shape)
        else:
            got = algoswap.ops.call(rule.op, *(by_name[n] for n in rule.inputs), algorithm=reference_name(rule.op), **rule.attrs(call))
        assert got.dtype == np.dtype(dtype) and got.shape == tuple(tensor.shape), (rule.wrt, got.dtype, got.shape)
        if rule.op is None:
            assert_close(got, tensor.grad, context=f"gradient of {rule.wrt}")
        else:
            assert_op_close(rule.op, got, tensor.grad, [by_name[n] for n in rule.inputs], rule.attrs(call),
                            context=f"gradient of {rule.wrt}: {rule.op}")


# ------------------------------------------------------------------------------------- dropout


def test_dropout_is_reproducible_unbiased_and_its_gradient_uses_the_same_mask(rng):
    x = rng.standard_normal((400, 500))
    y = algoswap.ops.dropout(x, p=0.3, seed=11)
    assert np.array_equal(y, algoswap.ops.dropout(x, p=0.3, seed=11))
    assert not np.array_equal(y, algoswap.ops.dropout(x, p=0.3, seed=12))
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.005  # the mask is a function of seed=11 alone: not a matter of chance
    assert_close(y[kept], x[kept] / 0.7)
    dy = rng.standard_normal(x.shape)
    np.testing.assert_array_equal(algoswap.ops.dropout_grad(dy, p=0.3, seed=11) != 0, kept)
    np.testing.assert_array_equal(algoswap.ops.dropout(x, p=0.3, seed=11, training=False), x)


def test_dropout2d_drops_whole_channels_with_dropouts_mask(rng):
    from algoswap_numpy.dropout import keep_mask

    x = rng.standard_normal((40, 50, 3, 2))
    y = algoswap.ops.dropout2d(x, p=0.4, seed=9)
    kept = keep_mask((40, 50), 0.4, 9)
    assert_close(y, np.where(kept[:, :, None, None], x / 0.6, 0))
    assert abs(kept.mean() - 0.6) < 0.03  # a function of seed=9 alone
    dy = rng.standard_normal(x.shape)
    assert_close(algoswap.ops.dropout2d_grad(dy, p=0.4, seed=9), np.where(kept[:, :, None, None], dy / 0.6, 0))


def test_dropout_mask_is_the_documented_hash():
    from algoswap_numpy.dropout import keep_mask

    def splitmix64(z: int) -> int:
        z = (z + 0x9E3779B97F4A7C15) % 2**64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        return z ^ (z >> 31)

    key = splitmix64(2**63 + 5)
    expected = [(splitmix64((key + i) % 2**64) >> 11) / 2**53 >= 0.4 for i in range(24)]
    assert keep_mask((2, 3, 4), 0.4, 2**63 + 5).ravel().tolist() == expected


# ---------------------------------------------------------------------------------- optimizers

TORCH_OPTIMIZERS: dict[str, Callable[..., Any]] = {
    "sgd": lambda p, lr: torch.optim.SGD(p, lr=lr),
    "momentum": lambda p, lr, momentum=0.9: torch.optim.SGD(p, lr=lr, momentum=momentum),
    "nesterov": lambda p, lr, momentum=0.9: torch.optim.SGD(p, lr=lr, momentum=momentum, nesterov=True),
    "adagrad": lambda p, lr, eps=1e-10: torch.optim.Adagrad(p, lr=lr, eps=eps),
    "adam": lambda p, lr, beta1=0.9, beta2=0.999, eps=1e-8: torch.optim.Adam(p, lr=lr, betas=(beta1, beta2), eps=eps),
}
STATE = {"sgd": 0, "momentum": 1, "nesterov": 1, "adagrad": 1, "adam": 2}
OPTIMIZER_CASES = [(name, attrs) for name in TORCH_OPTIMIZERS for attrs in OPTIMIZER_ATTRS[name]]


@pytest.mark.parametrize("name, attrs", OPTIMIZER_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZER_CASES)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_updates_follow_torch_over_several_steps(rng, name, attrs, dtype):
    param = rng.standard_normal((5, 4)).astype(dtype)
    initial = param.copy()
    state = [np.zeros_like(param) for _ in range(STATE[name])]
    weight = torch.nn.Parameter(torch.from_numpy(param.astype(np.float64)))
    options = {k: v for k, v in attrs.items() if k != "step"}
    optimizer = TORCH_OPTIMIZERS[name]([weight], **options)
    for step in range(1, 5):
        grad = rng.standard_normal(param.shape).astype(dtype)
        extra = {"step": step} if name == "adam" else {}
        returned = algoswap.ops.call(f"{name}_update", param, grad, *state, **options, **extra)
        assert returned is param
        weight.grad = torch.from_numpy(grad.astype(np.float64))
        optimizer.step()
    scale, length = update_scale(initial, weight, steps=4)
    assert_close(param, weight, reduction_length=length, scale=scale, context=f"{name} {attrs}")


@pytest.mark.parametrize("name, attrs", OPTIMIZER_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZER_CASES)])
def test_sparse_updates_are_the_dense_update_of_the_named_rows(rng, name, attrs):
    param = rng.standard_normal((8, 3))
    state = [rng.uniform(0.5, 2.0, param.shape) for _ in range(STATE[name])]
    indices = np.array([[1, 5, 1], [6, 5, 1]])
    rows = rng.standard_normal(indices.shape + (3,))
    named = np.unique(indices)
    dense_grad = algoswap.ops.embedding_grad(rows, indices, num_embeddings=8)[named]
    expected_param, expected_state = param[named].copy(), [s[named].copy() for s in state]
    algoswap.ops.call(f"{name}_update", expected_param, dense_grad, *expected_state, **attrs)
    untouched = [a.copy() for a in [param] + state]
    algoswap.ops.call(f"{name}_update_sparse", param, indices, rows, *state, **attrs)
    for got, expected, before in zip([param] + state, [expected_param] + expected_state, untouched):
        scale, length = update_scale(before[named], expected, steps=indices.size)
        assert_close(got[named], expected, reduction_length=length, scale=scale, context=f"{name} {attrs}")
        others = np.setdiff1d(np.arange(8), named)
        np.testing.assert_array_equal(got[others], before[others])


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_sparse_adagrad_and_adam_follow_torch_sparse_optimizers(rng):
    table = rng.standard_normal((10, 4))
    indices = np.array([2, 7, 2, 0])
    for name, make, attrs in [
        ("adagrad", lambda p: torch.optim.Adagrad(p, lr=0.1), {"lr": 0.1}),
        ("adam", lambda p: torch.optim.SparseAdam(p, lr=0.01, eps=1e-8), {"lr": 0.01}),
    ]:
        param, state = table.copy(), [np.zeros_like(table) for _ in range(STATE[name])]
        weight = torch.nn.Parameter(torch.from_numpy(table.copy()))
        optimizer = make([weight])
        for step in range(1, 4):
            rows = rng.standard_normal((4, 4))
            # SparseAdam adds eps before the bias correction, Adam (and adam_update_sparse) after: the eps that
            # makes them one formula is eps / sqrt(1 - beta2**step). (A tiny eps did not hide the difference
            # where a summed gradient entry is small: it failed about one draw in 36.)
            extra = {"step": step, "eps": 1e-8 / math.sqrt(1 - 0.999**step)} if name == "adam" else {}
            algoswap.ops.call(f"{name}_update_sparse", param, indices, rows, *state, **attrs, **extra)
            weight.grad = torch.sparse_coo_tensor(torch.from_numpy(indices)[None], torch.from_numpy(rows), table.shape)
            optimizer.step()
        scale, length = update_scale(table, weight, steps=3 * indices.size)
        assert_close(param, weight, reduction_length=length, scale=scale, context=name)


def test_embedding_sparse_gradient_is_indices_and_grad_output(rng):
    weight = torch.nn.Parameter(torch.from_numpy(rng.standard_normal((6, 3))))
    indices = np.array([[0, 4], [4, 5]])
    dy = rng.standard_normal((2, 2, 3))
    F.embedding(torch.from_numpy(indices), weight, sparse=True).backward(torch.from_numpy(dy))
    grad = weight.grad.coalesce()
    dense = algoswap.ops.embedding_grad(dy, indices, num_embeddings=6)
    assert_op_close("embedding_grad", dense, grad.to_dense(), [dy, indices], {"num_embeddings": 6})
    assert Arg((1,), "int", 1).kind == "int"  # the case helpers draw the indices the same way
