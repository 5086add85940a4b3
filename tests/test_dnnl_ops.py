"""The oneDNN backend's implementations of the operator set (arith, matmul, transpose, instance norm)
and the ops it declares unsupported: what the conformance suite does not cover.

Conformance (algoswap/testing/_cases_ops.py) checks every registered dnnl implementation on small cases; here:
larger random shapes against the NumPy reference, the predicates' refusals and their reasons, the
declared-unsupported reasons in the capability matrix, kernel names, and the extension's argument checks.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import assert_op_close
from algoswap.testing._cases_ops import OPS_FORWARD, OPS_GRADIENT_BUILDERS, OPTIMIZERS

algoswap_dnnl = pytest.importorskip("algoswap_dnnl", reason="algoswap-dnnl is not installed")

_available = algoswap.registry().backends["dnnl"].availability() if "dnnl" in algoswap.registry().backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"dnnl backend unavailable: {_available}")

def ext() -> Any:
    from algoswap_dnnl._ext import dnnl

    return dnnl


def _check(op: str, arrays: list[np.ndarray | None], algorithm: str = "direct", **attrs: Any) -> None:
    """The dnnl result of one call against the float64 NumPy reference (algoswap/testing/_scales.py's tolerance)."""
    got = algoswap.ops.call(op, *arrays, algorithm=f"dnnl:{algorithm}", **attrs)
    wide = [None if a is None else a.astype(np.float64) for a in arrays]
    ref = algoswap.ops.call(op, *wide, algorithm=f"numpy:{algorithm}", **attrs)
    assert_op_close(op, got, ref, arrays, attrs)


@pytest.mark.parametrize("shapes, attrs", [
    (((2, 3, 96, 80), (2, 3, 64, 96)), {"trans_a": True, "trans_b": True}),
    (((7, 1, 33, 65), (1, 5, 65, 17)), {}),
    (((4, 2, 3, 50, 40), (3, 30, 40)), {"trans_b": True}),
])
def test_batch_matmul_and_its_gradients_on_larger_shapes(shapes: Any, attrs: dict[str, Any], rng: np.random.Generator) -> None:
    a, b = (rng.standard_normal(s, dtype=np.float32) for s in shapes)
    _check("batch_matmul", [a, b], "gemm", **attrs)
    dy = rng.standard_normal(algoswap.ops.call("batch_matmul", a, b, **attrs).shape, dtype=np.float32)
    for grad, other, size in (("grad_a", b, {"a_size": a.shape}), ("grad_b", a, {"b_size": b.shape})):
        if not _full_batch(dy.shape, next(iter(size.values()))):
            continue  # a reduction over broadcast batch dimensions: refused (see the next test)
        _check(f"batch_matmul_{grad}", [dy, other], "gemm", **attrs, **size)


def _full_batch(out: tuple[int, ...], operand: tuple[int, ...]) -> bool:
    padded = (1,) * (len(out) - len(operand)) + tuple(operand)
    return padded[:-2] == out[:-2]


@pytest.mark.parametrize("op, attrs", [("neg", {}), ("sqrt", {}), ("add_scalar", {"value": 2.0}), ("mul_scalar", {"value": 3.0}),
                                       ("rsqrt", {}), ("clamp_min", {"value": 0.5})])
def test_unary_arithmetic_of_a_0d_array_keeps_its_shape(op: str, attrs: dict[str, Any]) -> None:
    _check(op, [np.array(1.5, np.float32)], **attrs)  # (a max over every axis, negated: the minimum)


def test_a_broadcast_operands_gradient_is_refused_as_a_reduction() -> None:
    with pytest.raises(algoswap.NoImplementationError, match="were broadcast to .*reduction"):
        algoswap.select("batch_matmul_grad_b", [(2, 3, 4, 6), (2, 3, 4, 5)], algorithm="dnnl:gemm", b_size=(1, 3, 5, 6))


def test_matmul_gradients_with_transposes(rng: np.random.Generator) -> None:
    for trans_a in (False, True):
        for trans_b in (False, True):
            a = rng.standard_normal((70, 50) if trans_a else (50, 70), dtype=np.float32)
            b = rng.standard_normal((30, 70) if trans_b else (70, 30), dtype=np.float32)
            dy = rng.standard_normal((50, 30), dtype=np.float32)
            flags = {"trans_a": trans_a, "trans_b": trans_b}
            for op, arrays in (("matmul", [a, b]), ("matmul_grad_a", [dy, b]), ("matmul_grad_b", [dy, a])):
                _check(op, arrays, "gemm", **flags)


def test_transpose_of_random_permutations(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 4, 5, 6, 7), dtype=np.float32)
    for _ in range(5):
        perm = tuple(int(d) for d in rng.permutation(5))
        got = algoswap.ops.call("transpose", x, algorithm="dnnl:direct", perm=perm)
        assert np.array_equal(got, np.transpose(x, perm)), perm


def test_instance_norm_and_gradients_on_a_larger_input(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 16, 12, 10), dtype=np.float32) * 3 + 1
    w, bias = rng.standard_normal(16, dtype=np.float32), rng.standard_normal(16, dtype=np.float32)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    for op, arrays in (("instance_norm", [x, w, bias]), ("instance_norm_grad_input", [dy, x, w]),
                       ("instance_norm_grad_weight", [dy, x])):
        _check(op, arrays)


def test_group_norm_and_gradients_on_a_larger_input(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 16, 12, 10), dtype=np.float32) * 3 + 1
    w, bias = rng.standard_normal(16, dtype=np.float32), rng.standard_normal(16, dtype=np.float32)
    dy = rng.standard_normal(x.shape, dtype=np.float32)
    for groups in (1, 4):
        for op, arrays in (("group_norm", [x, w, bias]), ("group_norm_grad_input", [dy, x, w]),
                           ("group_norm_grad_weight", [dy, x])):
            _check(op, arrays, num_groups=groups)


def test_arith_predicates_say_why_onednn_cannot_run_a_call() -> None:
    refusals = [
        ("div", [(4, 1), (3,)], {}, "broadcasts only one operand"),
        ("mul", [(2, 64, 8, 8), (8, 1)], {}, "reference kernel"),
        ("mul_grad", [(3, 4), (4,)], {"shape": (3, 1)}, "reduction"),
        ("sub_grad_b", [(3, 4)], {"shape": (4,)}, "reduction"),
    ]
    for op, shapes, attrs, words in refusals:
        with pytest.raises(algoswap.NoImplementationError, match=words):
            algoswap.select(op, shapes, algorithm="dnnl:direct", **attrs)
        assert algoswap.select(op, shapes, **attrs).impl.backend != "dnnl", op  # another backend serves it



@pytest.mark.parametrize("op, shapes", [("sub", ((3, 1, 1, 1), (2, 3, 4, 5, 6))), ("div", ((5, 1), (3, 5, 7)))])
def test_a_broadcast_first_operand_is_swapped_and_turned_back_by_a_post_op(op: str, shapes: Any,
                                                                           rng: np.random.Generator) -> None:
    a, b = (rng.uniform(0.5, 2.0, s).astype(np.float32) for s in shapes)
    _check(op, [a, b])
    assert algoswap.select(op, list(shapes), algorithm="dnnl:direct").impl.backend == "dnnl"


def test_div_grad_b_is_one_binary_primitive_with_post_ops(rng: np.random.Generator) -> None:
    dy, b = rng.standard_normal((2, 8, 6, 5), dtype=np.float32), rng.uniform(0.5, 2.0, (2, 8, 6, 5)).astype(np.float32)
    a = rng.standard_normal((8, 1, 1), dtype=np.float32)
    _check("div_grad_b", [dy, a, b], shape=b.shape)
    with pytest.raises(algoswap.NoImplementationError, match="reduction"):
        algoswap.select("div_grad_b", [(2, 8), (2, 8), (8,)], algorithm="dnnl:direct", shape=(8,))


def test_ops_report_their_kernels() -> None:
    for op, shapes, attrs, words in [
        ("mul", [(2, 64, 8, 8), (64, 1, 1)], {}, ("jit",)),
        ("div_grad_a", [(4, 5), (4, 5)], {"shape": (4, 5)}, ("jit",)),
        ("pow_scalar", [(4096,)], {"exponent": 2.0}, ("jit",)),
        ("rsqrt", [(4096,)], {}, ("jit",)),
        ("rsqrt_grad", [(4096,), (4096,)], {}, ("jit",)),
        ("matmul", [(64, 32), (48, 64)], {"trans_a": True, "trans_b": True}, ("brg", "gemm")),
        ("batch_matmul", [(4, 1, 16, 8), (3, 8, 16)], {}, ("brg", "gemm")),
        ("transpose", [(8, 16, 32)], {"perm": (2, 0, 1)}, ("jit", "simple")),
        ("instance_norm", [(2, 8, 16, 16), (8,), (8,)], {}, ("bnorm",)),
        ("group_norm", [(2, 8, 16, 16), (8,), (8,)], {"num_groups": 2}, ("bnorm",)),
    ]:
        selection = algoswap.select(op, shapes, algorithm="dnnl:default", **attrs)
        assert selection.impl.backend == "dnnl", op
        assert any(word in selection.kernel for word in words), (op, selection.kernel)
    assert algoswap.select("rsqrt", [(4096,)], algorithm="dnnl:default").kernel.count("jit") == 2  # sqrt, then pow(-1)
    kernel = algoswap.select("instance_norm_grad_weight", [(2, 8, 4, 4), (2, 8, 4, 4)], algorithm="dnnl:default").kernel
    assert "numpy sum over N" in kernel


@pytest.mark.parametrize("op, words", [
    ("reduce_max_grad", "no primitive"), ("sum_to_shape", "reference kernel"), ("broadcast_to", "no broadcast primitive"),
("pad", "no padding primitive"), ("embedding", "gather"),
    ("dropout", "random-number"), ("softmax_cross_entropy", "no loss primitive"), ("csrmm", "sparse"),
    ("adam_update_sparse", "no optimizer primitive"), ("zeros_like", "no fill primitive"),
])
def test_unserved_ops_are_declared_unsupported_with_a_reason(op: str, words: str) -> None:
    matrix = json.loads(algoswap.capabilities(op).to_json())
    cell = matrix["ops"][op]["backends"]["dnnl"]["direct"]
    assert cell["supported"] is False and words in cell["reason"], cell


def test_every_op_of_the_set_is_served_or_declared() -> None:
    registry = algoswap.registry()
    served = {impl.op for impl in registry.implementations() if impl.backend == "dnnl"}
    declared = {key[0] for key in registry.unsupported if key[2] == "dnnl"}
    the_set = set(OPS_FORWARD) | set(OPS_GRADIENT_BUILDERS) | set(OPTIMIZERS)
    assert the_set - served - declared == set()


def test_extension_refuses_wrong_arrays_and_names_the_op() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="sub: argument 'a' must be float32"):
        ext().binary(x.astype(np.float64), x, "sub")
    with pytest.raises(ValueError, match="kind must be 'add', 'sub', 'mul' or 'div'"):
        ext().binary(x, x, "pow")
    with pytest.raises(ValueError, match="div: b must broadcast"):
        ext().binary(x, np.ones((2, 4), np.float32), "div")
    with pytest.raises(ValueError, match="mul: post-op 0: its array must broadcast"):
        ext().binary(x, x, "mul", [("div", np.ones((3, 3), np.float32), 0.0, 0.0)])
    with pytest.raises(TypeError, match="mul: argument 'post\\[0\\]' must be float32"):
        ext().binary(x, x, "mul", [("div", x.astype(np.float64), 0.0, 0.0)])
    with pytest.raises(ValueError, match="transpose: perm must be a permutation"):
        ext().transpose(x, [0, 0])
    with pytest.raises(ValueError, match="matmul: batch dimension 0 of a and b differ"):
        ext().matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="kind must be .*'pow'"):
        ext().eltwise(x, "cube")


def test_bad_calls_name_the_op_and_argument() -> None:
    with pytest.raises(algoswap.OpArgumentError, match="'b'"):
        algoswap.ops.call("matmul", np.ones((3, 4), np.float32), np.ones((5, 6), np.float32), algorithm="dnnl:gemm")
    with pytest.raises(algoswap.OpArgumentError, match="perm"):
        algoswap.ops.call("transpose", np.ones((3, 4), np.float32), algorithm="dnnl:direct", perm=(0, 0))


def test_slow_pow_exponents_are_left_to_other_backends() -> None:
    reason = algoswap.registry().impls[("pow_scalar", "direct", "dnnl")].check(
        algoswap.registry().spec("pow_scalar").bind([(4096,)], ["float32"], {"exponent": 1.5}))
    assert isinstance(reason, str) and "fast kernels only for exponents" in reason
    assert algoswap.select("pow_scalar", [(4096,)], exponent=1.5).impl.backend != "dnnl"
