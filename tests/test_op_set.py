"""The operator set's contracts beyond single calls: every differentiable input declares its
gradient, in-place updates survive a transfer to another memory space, and the conformance suite
catches a wrong optimizer-state update."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from test_conformance import check_conformance
from test_registry import BOXED, Boxed, global_plugin, make_plugin  # noqa: F401 (global_plugin is a fixture)

DIFFERENTIABLE = {
    "add": {"a", "b"}, "sub": {"a", "b"}, "mul": {"a", "b"}, "div": {"a", "b"}, "neg": {"input"},
    "sqrt": {"input"}, "rsqrt": {"input"}, "add_scalar": {"input"}, "mul_scalar": {"input"}, "rdiv_scalar": {"input"},
    "pow_scalar": {"input"}, "matmul": {"a", "b"}, "batch_matmul": {"a", "b"}, "reduce_sum": {"input"},
    "reduce_mean": {"input"}, "broadcast_to": {"input"}, "sum_to_shape": {"input"}, "slice": {"input"},
    "split": {"input"}, "pad": {"input"}, "transpose": {"input"}, "where": {"x", "y"}, "embedding": {"weight"},
    "instance_norm": {"input", "weight", "bias"}, "dropout": {"input"}, "dropout2d": {"input"}, "softmax_cross_entropy": {"logits"},
    "binary_cross_entropy": {"input"}, "csrmv": {"vector"}, "csrmm": {"dense"},
}
SELF_ADJOINT = {"neg": "neg", "mul_scalar": "mul_scalar", "transpose": "transpose", "csrmv": "csrmv",
                "broadcast_to": "sum_to_shape", "sum_to_shape": "broadcast_to", "add": "sum_to_shape",
                "sub": "sum_to_shape", "split": "slice_grad"}


@pytest.mark.parametrize("op", sorted(DIFFERENTIABLE))
def test_every_differentiable_input_declares_its_gradient(op: str) -> None:
    registry = algoswap.registry()
    spec = registry.spec(op)
    assert {rule.wrt for rule in spec.gradients} == DIFFERENTIABLE[op]
    for rule in spec.gradients:
        assert rule.op is None or registry.spec(rule.op).grad_of == op or rule.op == SELF_ADJOINT.get(op), (op, rule.op)


def test_optimizer_ops_declare_what_they_update() -> None:
    registry = algoswap.registry()
    for name, state in [("sgd", ()), ("momentum", ("velocity",)), ("adagrad", ("accumulator",)), ("adam", ("m", "v"))]:
        for suffix in ("", "_sparse"):
            assert registry.spec(f"{name}_update{suffix}").in_place == ("param",) + state


def test_in_place_updates_come_back_from_another_memory_space(global_plugin: Any, rng: np.random.Generator) -> None:  # noqa: F811
    def momentum_boxed(param: Boxed, grad: Boxed, velocity: Boxed, *, lr: float, momentum: float) -> Boxed:
        velocity.data[...] = momentum * velocity.data + grad.data
        param.data -= lr * velocity.data
        return param

    def register(registry: Any) -> None:
        registry.add_backend("box", device="boxdev", memory=BOXED, priority=50)
        registry.add_implementation("momentum_update", "direct", "box", momentum_boxed)

    assert global_plugin(make_plugin(register), name="boxed").status == "loaded"
    param, grad = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    velocity = rng.standard_normal((3, 4))
    expected_param, expected_velocity = param.copy(), velocity.copy()
    algoswap.ops.momentum_update(expected_param, grad, expected_velocity, lr=0.1, algorithm="numpy:direct")
    returned = algoswap.ops.momentum_update(param, grad, velocity, lr=0.1, algorithm="box:direct", transfer=True)
    assert returned is param
    np.testing.assert_allclose(param, expected_param, rtol=1e-14)
    np.testing.assert_allclose(velocity, expected_velocity, rtol=1e-14)


def test_conformance_catches_a_wrong_state_update(rng: np.random.Generator) -> None:
    def forgets_velocity(param: np.ndarray, grad: np.ndarray, velocity: np.ndarray, *, lr: float, momentum: float) -> np.ndarray:
        param -= param.dtype.type(lr) * (momentum * velocity + grad)  # the right param, the old velocity
        return param

    wrong = algoswap.ImplRecord("momentum_update", "wrong", "numpy", forgets_velocity)
    ran, failures = check_conformance(wrong, "float64", rng)
    assert ran == 2 and len(failures) == 2 and all("'velocity' updated with relative error" in f for f in failures)
