"""The operator set's contracts beyond single calls: every differentiable input declares its
gradient, in-place updates survive a transfer to another memory space, and the conformance suite
catches a wrong optimizer-state update."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import assert_close
from algoswap.testing._scales import update_scale
from algoswap.testing._conformance import check_conformance
from test_registry import BOXED, Boxed, global_plugin, make_plugin  # noqa: F401 (global_plugin is a fixture)

DIFFERENTIABLE = {
    "add": {"a", "b"}, "sub": {"a", "b"}, "mul": {"a", "b"}, "div": {"a", "b"}, "neg": {"input"},
    "sqrt": {"input"}, "rsqrt": {"input"}, "add_scalar": {"input"}, "mul_scalar": {"input"}, "rdiv_scalar": {"input"}, "clamp_min": {"input"},
    "pow_scalar": {"input"}, "matmul": {"a", "b"}, "batch_matmul": {"a", "b"}, "reduce_sum": {"input"},
    "reduce_mean": {"input"}, "broadcast_to": {"input"}, "sum_to_shape": {"input"}, "slice": {"input"},
    "split": {"input"}, "pad": {"input"}, "transpose": {"input"}, "where": {"x", "y"}, "embedding": {"weight"},
    "instance_norm": {"input", "weight", "bias"}, "group_norm": {"input", "weight", "bias"}, "dropout": {"input"}, "dropout2d": {"input"}, "softmax_cross_entropy": {"logits"},
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
    start_param, start_velocity = param.copy(), velocity.copy()
    algoswap.ops.momentum_update(expected_param, grad, expected_velocity, lr=0.1, algorithm="numpy:direct")
    returned = algoswap.ops.momentum_update(param, grad, velocity, lr=0.1, algorithm="box:direct", transfer=True)
    assert returned is param
    for got, expected, before in [(param, expected_param, start_param), (velocity, expected_velocity, start_velocity)]:
        scale, length = update_scale(before, expected)
        assert_close(got, expected, reduction_length=length, scale=scale)


def test_conformance_catches_a_wrong_state_update(rng: np.random.Generator) -> None:
    def forgets_velocity(param: np.ndarray, grad: np.ndarray, velocity: np.ndarray, *, lr: float, momentum: float) -> np.ndarray:
        param -= param.dtype.type(lr) * (momentum * velocity + grad)  # the right param, the old velocity
        return param

    wrong = algoswap.ImplRecord("momentum_update", "wrong", "numpy", forgets_velocity)
    ran, failures = check_conformance(wrong, "float64", rng)
    assert ran == 2 and len(failures) == 2 and all("'velocity' updated with relative error" in f for f in failures)


# Every computation operator of the seed's table and the op(s) serving it here.
SEED_OPS = {
    "AddByConstOp": ["add_scalar"], "AddOp": ["add"], "Avg_Pool2dOp": ["avgpool2d"], "Avg_Pool2d_GradientOp": ["avgpool2d_grad"],
    "BatchMatMulOp": ["batch_matmul"], "Batch_NormalizationOp": ["batch_norm_train", "batchnorm2d"],
    "Batch_Normalization_GradientOp": ["batch_norm_train_grad_input", "batch_norm_train_grad_weight", "batch_norm_train_grad_bias"],
    "BinaryCrossEntropyOp": ["binary_cross_entropy"], "BroadcastToOp": ["broadcast_to"], "BroadcastShapeOp": ["broadcast_to"],
    "ConcatOp": ["concat"], "Concat_gradientOP": ["split"], "Conv2dOp": ["conv2d"], "Conv2d_Gradient_of_DataOp": ["conv2d_grad_input"],
    "Conv2d_Gradient_of_FilterOp": ["conv2d_grad_weight"], "Conv2d_BroadcastToOp": ["reshape", "broadcast_to"],
    "Conv2d_ReduceSumOp": ["reduce_sum", "conv2d_grad_bias"], "CsrmvOp": ["csrmv"], "CsrmmOp": ["csrmm", "csrmm_grad_dense"],
    "DivOp": ["div"], "DivConstOp": ["rdiv_scalar"], "DropoutOp": ["dropout"], "Dropout_GradientOp": ["dropout_grad"],
    "Dropout2dOp": ["dropout2d"], "Dropout2d_GradientOp": ["dropout2d_grad"], "EmbeddingLookUp": ["embedding"],
    "EmbeddingLookUp_Gradient": ["embedding_grad"], "Instance_Normalization2dOp": ["instance_norm"],
    "Instance_Normalization2d_GradientOp": ["instance_norm_grad_input", "instance_norm_grad_weight", "instance_norm_grad_bias"],
    "Layer_NormalizationOp": ["layer_norm"], "Layer_Normalization_GradientOp": ["layer_norm_grad_input", "layer_norm_grad_weight", "layer_norm_grad_bias"],
    "LeakyReluOp": ["leaky_relu"], "LeakyReluGradientOp": ["leaky_relu_grad"], "MatMulOp": ["matmul", "matmul_grad_a", "matmul_grad_b"],
    "Max_Pool2dOp": ["maxpool2d"], "Max_Pool2d_GradientOp": ["maxpool2d_grad"], "MulByConstOp": ["mul_scalar"], "MulOp": ["mul", "mul_grad"],
    "OneHotOp": ["one_hot"], "OnesLikeOp": ["ones_like"], "OppositeOp": ["neg"], "PadOp": ["pad"], "Pad_GradientOp": ["pad_grad"],
    "ReduceMeanOp": ["reduce_mean", "reduce_mean_grad"], "ReduceSumOp": ["reduce_sum", "reduce_sum_grad"], "ReduceSumAxisZeroOp": ["reduce_sum"],
    "ReluOp": ["relu"], "ReluGradientOp": ["relu_grad"], "Array_ReshapeOp": ["reshape"], "SigmoidOp": ["sigmoid"], "SliceOp": ["slice"],
    "SliceGradientOp": ["slice_grad"], "SoftmaxOp": ["softmax"], "SoftmaxGradientOp": ["softmax_grad"],
    "SoftmaxCrossEntropyOp": ["softmax_cross_entropy"], "SoftmaxCrossEntropyGradientOp": ["softmax_cross_entropy_grad"],
    "SplitOp": ["split"], "SplitGradientOp": ["slice_grad"], "SqrtOp": ["sqrt"], "ReciprocalSqrtOp": ["rsqrt"], "TanhOp": ["tanh"],
    "TransposeOp": ["transpose"], "WhereOp": ["where"], "ZerosLikeOp": ["zeros_like"],
    "OptimizerOp": [f"{name}_update" for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")],
    "OptimizerOp for sparse": [f"{name}_update_sparse" for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")],
}
# Not ops of this registry: DistGCN_15dOp (a distributed GCN layer: communication, not one kernel),
# MatrixDotOp (marked "may have bugs and is not complete" in the seed; mul and reduce_sum cover it),
# DataloaderOp (the graph's data loader).


@pytest.mark.parametrize("seed_op", sorted(SEED_OPS))
def test_every_seed_operator_has_ops_with_a_reference(seed_op: str) -> None:
    registry = algoswap.registry()
    for op in SEED_OPS[seed_op]:
        assert registry.implementations(op, "numpy"), (seed_op, op)
