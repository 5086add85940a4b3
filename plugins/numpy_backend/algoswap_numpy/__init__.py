"""The NumPy reference backend of algoswap: every op, forward and backward, in vectorised NumPy.

It defines what each op means: every other backend is tested against it.
"""

from __future__ import annotations

from typing import Any

from . import (
    activation, arith, conv, dropout, elementwise, indexing, linear, loss, matmul, norm, optim, pool, reduce, shape,
    slicing, softmax, sparse,
)

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register"]

BACKEND = "numpy"
# Data movement (reshape, concat, slicing, ...) works on any dtype; bfloat16 arrays come from ml_dtypes.
_ALL_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64")


def _winograd_supports(call: Any) -> bool | str:
    kernel = call.shape("weight")[2:]
    return conv.winograd_applies(kernel, call.attrs["stride"], call.attrs["dilation"])


def algoswap_api_version() -> str:
    return ">=1,<2"


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cpu", priority=0, description="NumPy reference implementations (host memory)")
    _register_conv(registry)
    _register_simple(registry)
    _register_modules(registry)


def _register_conv(registry: Any) -> None:
    add = registry.add_implementation
    # Winograd tiles and FFTs mix many inputs into each intermediate: one NaN or inf may make others NaN.
    algorithms = (
        ("smm", conv.conv2d_smm, 30, None, "numpy im2col + matmul (BLAS gemm)", "exact"),
        ("winograd", conv.conv2d_winograd, 20, _winograd_supports, "numpy Winograd F(2x2,3x3) tiles", "spreads"),
        ("direct", conv.conv2d_direct, 10, None, "numpy tap-by-tap tensordot", "exact"),
        ("fft", conv.conv2d_fft, 0, None, "numpy rfft2 pointwise products", "spreads"),
    )
    for algorithm, function, priority, supports, kernel, nan in algorithms:
        add("conv2d", algorithm, BACKEND, function, priority=priority, supports=supports, kernel=kernel, nan=nan)
        add("conv2d_fused", algorithm, BACKEND, conv.fused(function), priority=priority, supports=supports,
            kernel=f"{kernel}, then the add and activation in place", nan=nan)
    add("conv2d_grad_input", "direct", BACKEND, conv.conv2d_grad_input, kernel="numpy tap-by-tap scatter")
    add("conv2d_grad_weight", "direct", BACKEND, conv.conv2d_grad_weight, kernel="numpy tap-by-tap tensordot")
    add("conv2d_grad_bias", "direct", BACKEND, conv.conv2d_grad_bias, kernel="numpy sum")


def _register_simple(registry: Any) -> None:
    table = {
        "linear": linear.linear,
        "linear_grad_input": linear.linear_grad_input,
        "linear_grad_weight": linear.linear_grad_weight,
        "linear_grad_bias": linear.linear_grad_bias,
        "maxpool2d": pool.maxpool2d,
        "maxpool2d_grad": pool.maxpool2d_grad,
        "avgpool2d": pool.avgpool2d,
        "avgpool2d_grad": pool.avgpool2d_grad,
        "adaptiveavgpool2d": pool.adaptiveavgpool2d,
        "adaptiveavgpool2d_grad": pool.adaptiveavgpool2d_grad,
        "relu": activation.relu,
        "relu_grad": activation.relu_grad,
        "sigmoid": activation.sigmoid,
        "sigmoid_grad": activation.sigmoid_grad,
        "tanh": activation.tanh,
        "tanh_grad": activation.tanh_grad,
        "leaky_relu": activation.leaky_relu,
        "leaky_relu_grad": activation.leaky_relu_grad,
        "softmax": softmax.softmax,
        "softmax_grad": softmax.softmax_grad,
        "log_softmax": softmax.log_softmax,
        "log_softmax_grad": softmax.log_softmax_grad,
        "add": elementwise.add,
        "batchnorm2d": norm.batchnorm2d,
        "batch_norm_train": norm.batch_norm_train,
        "batch_norm_train_grad_input": norm.batch_norm_train_grad_input,
        "batch_norm_train_grad_weight": norm.batch_norm_train_grad_weight,
        "batch_norm_train_grad_bias": norm.batch_norm_train_grad_bias,
        "layer_norm": norm.layer_norm,
        "layer_norm_grad_input": norm.layer_norm_grad_input,
        "layer_norm_grad_weight": norm.layer_norm_grad_weight,
        "layer_norm_grad_bias": norm.layer_norm_grad_bias,
    }
    algorithms = {"linear": "gemm", "linear_grad_input": "gemm", "linear_grad_weight": "gemm"}
    for op, fn in table.items():
        registry.add_implementation(op, algorithms.get(op, "direct"), BACKEND, fn, kernel=f"numpy {fn.__name__}")
    registry.add_implementation("flatten", "direct", BACKEND, shape.flatten, dtypes=_ALL_DTYPES, kernel="numpy reshape")
    registry.add_implementation("reshape", "direct", BACKEND, shape.reshape, dtypes=_ALL_DTYPES, kernel="numpy reshape")
    registry.add_implementation("concat", "direct", BACKEND, shape.concat, dtypes=_ALL_DTYPES, kernel="numpy concatenate")


# Ops of these modules are registered by name: each op's function is the module attribute of the
# same name ("slice" is slicing.slice_), as the "direct" algorithm (matmul's as "gemm").
_MODULES = {
    arith: ("sub", "sub_grad_b", "mul", "mul_grad", "div", "div_grad_a", "div_grad_b", "neg", "sqrt", "sqrt_grad",
            "rsqrt", "rsqrt_grad", "add_scalar", "mul_scalar", "rdiv_scalar", "rdiv_scalar_grad", "pow_scalar",
            "pow_scalar_grad"),
    matmul: ("matmul", "matmul_grad_a", "matmul_grad_b", "batch_matmul", "batch_matmul_grad_a", "batch_matmul_grad_b"),
    reduce: ("reduce_sum", "reduce_sum_grad", "reduce_mean", "reduce_mean_grad", "broadcast_to", "sum_to_shape"),
    slicing: ("slice_grad", "pad", "pad_grad"),
    norm: ("instance_norm", "instance_norm_grad_input", "instance_norm_grad_weight", "instance_norm_grad_bias"),
    dropout: ("dropout", "dropout_grad", "dropout2d", "dropout2d_grad"),
    loss: ("softmax_cross_entropy", "softmax_cross_entropy_grad", "binary_cross_entropy", "binary_cross_entropy_grad"),
    indexing: ("where", "where_grad", "embedding", "embedding_grad"),
    sparse: ("csrmv", "csrmm", "csrmm_grad_dense"),
    optim: tuple(f"{name}_update{kind}" for kind in ("", "_sparse") for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")),
}
_ANY_DTYPE = {"slice": slicing.slice_, "split": slicing.split, "transpose": slicing.transpose,
              "zeros_like": arith.zeros_like, "ones_like": arith.ones_like}
_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _register_modules(registry: Any) -> None:
    add = registry.add_implementation
    for module, ops in _MODULES.items():
        for op in ops:
            algorithm = "gemm" if module is matmul else "direct"
            add(op, algorithm, BACKEND, getattr(module, op), kernel=f"numpy {op}")
    for op, fn in _ANY_DTYPE.items():
        add(op, "direct", BACKEND, fn, dtypes=_ALL_DTYPES, kernel=f"numpy {op}")
    add("one_hot", "direct", BACKEND, indexing.one_hot, dtypes=_INT_DTYPES, kernel="numpy eye[indices]")
