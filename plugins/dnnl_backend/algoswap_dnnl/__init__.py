"""The oneDNN backend of algoswap: float32 convolution, matmul, pooling, eltwise, normalisation,
softmax, binary, reorder and concat primitives on the CPU.

Implementations are registered as "module:attribute" strings, so discovery imports neither the
compiled extension nor libdnnl; the availability probe loads them, once, when the backend is first
considered. Primitives are made once per shape and attributes, cached, and shared by threads.
"""

from __future__ import annotations

from typing import Any

from algoswap import Ref

from ._settings import set_layout

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register", "set_layout"]

BACKEND = "dnnl"
F32 = ("float32",)
# bfloat16 (numpy arrays of ml_dtypes.bfloat16; float32 accumulation) where the CPU has bf16
# instructions: each predicate refuses a bfloat16 call whose primitive would be oneDNN's reference kernel.
BF16 = ("float32", "bfloat16")
# oneDNN 3.2's reduction primitive runs its reference kernel for these layouts (measured ~100x
# slower than numpy.sum): bias gradients are summed by NumPy, and say so.
BIAS_KERNEL = "numpy sum (oneDNN 3.2 reduction would be its reference kernel)"
REDUCTION_REASON = (
    "oneDNN 3.2's reduction primitive runs its reference kernel (ref:any) unless the reduced axes are the innermost: "
    "measured 1316 ms vs numpy.sum 17 ms over (N, H, W) of 64x256x56x56, 155 vs 1.2 ms over the rows of 4096x1024; "
    "its jit kernel for innermost axes was still slower (2.4 vs 0.8 ms, 18 vs 15 ms; benchmarks/dnnl_reduction.cpp)")
WINOGRAD_REASON = "oneDNN 3.2 has no f32 Winograd convolution on CPU (the primitive descriptor is refused)"


def probe() -> bool | str:
    """True if the extension and libdnnl load, else why not (never raises)."""
    try:
        from ._ext import dnnl

        version = dnnl.version()
    except Exception as exc:  # noqa: BLE001 - any failure is a reason, not a crash
        return f"the oneDNN extension does not load: {type(exc).__name__}: {exc}"
    if tuple(version[:2]) != (3, 2):
        return f"built for oneDNN 3.2, loaded {version[0]}.{version[1]}.{version[2]}"
    return True


def algoswap_api_version() -> str:
    return ">=1,<2"


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cpu", priority=10, probe=probe,
                         description="oneDNN 3.2 primitives on the CPU (float32, host memory)")
    _register_conv(registry)
    _register_others(registry)
    _register_more(registry)
    _register_ops(registry)
    for ops, reason in _UNSUPPORTED.items():
        for op in ops.split():
            registry.declare_unsupported(op, "direct", BACKEND, reason)


def _forward_dtypes(op: str) -> tuple[str, ...]:
    """Forward ops run in bfloat16 too; gradients in float32 only."""
    return F32 if "_grad" in op else BF16


def _any_if_forward(op: str) -> str:
    """Forward pooling and relu take channels-last arrays as they are (and keep that order); gradients do not."""
    return "contiguous" if op.endswith("_grad") else "any"


def _register_conv(registry: Any) -> None:
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    for op, what in (("conv2d", ""), ("conv2d_fused", " with the residual add and relu as post-ops")):
        add(op, "auto", BACKEND, f"{conv}:{op}_auto", dtypes=BF16, priority=20, supports=f"{conv}:supports_auto",
            kernel=Ref(f"{__name__}.conv:kernel_auto"), layout="channels_last",
            description=f"oneDNN convolution_auto (the library picks the algorithm){what}")
        add(op, "direct", BACKEND, f"{conv}:{op}_direct", dtypes=BF16, priority=10, supports=f"{conv}:supports",
            kernel=Ref(f"{__name__}.conv:kernel"), layout="channels_last", description=f"oneDNN convolution_direct{what}")
        registry.declare_unsupported(op, "winograd", BACKEND, WINOGRAD_REASON)
    for op in ("conv2d_grad_input", "conv2d_grad_weight"):
        add(op, "direct", BACKEND, f"{conv}:{op}", dtypes=F32, supports=f"{conv}:supports", kernel=Ref(f"{__name__}.conv:kernel"))
    add("conv2d_grad_bias", "direct", BACKEND, f"{conv}:conv2d_grad_bias", dtypes=F32, kernel=BIAS_KERNEL)


def _register_others(registry: Any) -> None:
    add = registry.add_implementation
    for op in ("linear", "linear_grad_input", "linear_grad_weight"):
        add(op, "gemm", BACKEND, f"{__name__}.linear:{op}", dtypes=_forward_dtypes(op), supports=f"{__name__}.linear:supports",
            kernel=Ref(f"{__name__}.linear:kernel"))
    add("linear_grad_bias", "direct", BACKEND, f"{__name__}.linear:linear_grad_bias", dtypes=F32, kernel=BIAS_KERNEL)
    for op in ("maxpool2d", "maxpool2d_grad", "avgpool2d", "avgpool2d_grad"):
        add(op, "direct", BACKEND, f"{__name__}.pool:{op}", dtypes=_forward_dtypes(op), supports=f"{__name__}.pool:supports",
            kernel=Ref(f"{__name__}.pool:kernel"), layout=_any_if_forward(op))
    for op in ("adaptiveavgpool2d", "adaptiveavgpool2d_grad"):
        add(op, "direct", BACKEND, f"{__name__}.pool:{op}", dtypes=_forward_dtypes(op), supports=f"{__name__}.pool:supports_adaptive",
            kernel=Ref(f"{__name__}.pool:kernel"), layout=_any_if_forward(op))
    add("relu", "direct", BACKEND, f"{__name__}.activation:relu", dtypes=BF16, kernel=Ref(f"{__name__}.activation:kernel"),
        supports=f"{__name__}.activation:supports_relu", layout="any")
    add("relu_grad", "direct", BACKEND, f"{__name__}.activation:relu_grad", dtypes=F32, kernel=Ref(f"{__name__}.activation:kernel"))


def _register_more(registry: Any) -> None:
    add = registry.add_implementation
    for op in ("sigmoid", "sigmoid_grad", "tanh", "tanh_grad", "leaky_relu", "leaky_relu_grad"):
        add(op, "direct", BACKEND, f"{__name__}.activation:{op}", dtypes=F32, kernel=Ref(f"{__name__}.activation:kernel"))
    norm = f"{__name__}.norm"
    for op in ("batchnorm2d", "batch_norm_train", "batch_norm_train_grad_input", "batch_norm_train_grad_weight",
               "layer_norm", "layer_norm_grad_input", "layer_norm_grad_weight"):
        add(op, "direct", BACKEND, f"{norm}:{op}", dtypes=F32, supports=f"{norm}:supports", kernel=Ref(f"{__name__}.norm:kernel"))
    for op in ("batch_norm_train_grad_bias", "layer_norm_grad_bias"):
        add(op, "direct", BACKEND, f"{norm}:{op}", dtypes=F32, kernel=BIAS_KERNEL)
    for op in ("softmax", "softmax_grad", "log_softmax", "log_softmax_grad"):
        add(op, "direct", BACKEND, f"{__name__}.softmax:{op}", dtypes=F32, kernel=Ref(f"{__name__}.softmax:kernel"))
    add("add", "direct", BACKEND, f"{__name__}.elementwise:add", dtypes=BF16, supports=f"{__name__}.elementwise:supports",
        kernel=Ref(f"{__name__}.elementwise:kernel"), layout="any")
    add("concat", "direct", BACKEND, f"{__name__}.shape:concat", dtypes=F32, kernel=Ref(f"{__name__}.shape:kernel"))


_ARITH = ("sub mul div sub_grad_b mul_grad div_grad_a div_grad_b neg sqrt sqrt_grad rsqrt rsqrt_grad add_scalar mul_scalar "
          "rdiv_scalar rdiv_scalar_grad pow_scalar pow_scalar_grad").split()
_MATMUL = ("matmul", "matmul_grad_a", "matmul_grad_b", "batch_matmul", "batch_matmul_grad_a", "batch_matmul_grad_b")


def _register_ops(registry: Any) -> None:
    add = registry.add_implementation
    for op in _ARITH:
        add(op, "direct", BACKEND, f"{__name__}.arith:{op}", dtypes=F32, supports=f"{__name__}.arith:supports",
            kernel=Ref(f"{__name__}.arith:kernel"))
    for op in _MATMUL:
        add(op, "gemm", BACKEND, f"{__name__}.matmul:{op}", dtypes=F32, supports=f"{__name__}.matmul:supports",
            kernel=Ref(f"{__name__}.matmul:kernel"))
    add("transpose", "direct", BACKEND, f"{__name__}.slicing:transpose", dtypes=F32, kernel=Ref(f"{__name__}.slicing:kernel"),
        description="oneDNN reorder from the input's permuted strides")
    norm = f"{__name__}.norm"
    for op in ("instance_norm", "instance_norm_grad_input", "instance_norm_grad_weight"):
        add(op, "direct", BACKEND, f"{norm}:{op}", dtypes=F32, supports=f"{norm}:supports", kernel=Ref(f"{__name__}.norm:kernel"),
            description="oneDNN batch normalization of the input seen as (1, N*C, H, W)")
    add("instance_norm_grad_bias", "direct", BACKEND, f"{norm}:instance_norm_grad_bias", dtypes=F32, kernel=BIAS_KERNEL)


# ops of the seed set no oneDNN 3.2 primitive serves (space-separated) -> why
_UNSUPPORTED = {
    "reduce_sum reduce_mean sum_to_shape": REDUCTION_REASON,
    "reduce_sum_grad reduce_mean_grad broadcast_to": "a broadcast copy: oneDNN 3.2 has no broadcast primitive",
    "zeros_like ones_like": "a fill: oneDNN 3.2 has no fill primitive",
    "slice split slice_grad": "a copy into or out of a window: oneDNN 3.2 has no slicing primitive (a reorder of a "
                              "sub-memory could copy it, with NumPy's memory traffic; not mapped)",
    "pad pad_grad": "oneDNN 3.2 has no padding primitive (constant, reflect or replicate)",
    "one_hot where where_grad embedding embedding_grad": "oneDNN 3.2 has no gather, scatter or select primitive",
    "dropout dropout_grad dropout2d dropout2d_grad": "oneDNN 3.2 has no random-number generation (no dropout primitive)",
    "softmax_cross_entropy softmax_cross_entropy_grad binary_cross_entropy binary_cross_entropy_grad":
        "oneDNN 3.2 has no loss primitive (the loss gathers targets and reduces beyond softmax)",
    "csrmv csrmm csrmm_grad_dense": "oneDNN 3.2 has no sparse (CSR) primitives",
    " ".join(f"{name}_update{kind}" for kind in ("", "_sparse") for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")):
        "oneDNN 3.2 has no optimizer primitive (an update is several elementwise steps on arrays updated in place)",
}
