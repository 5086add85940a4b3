"""The CUDA backend of algoswap: cuDNN convolution engines through NVIDIA's cuDNN frontend, cuBLAS
through CuPy, and our own CuPy raw kernels, on CuPy arrays in GPU memory.

Implementations are registered as "module:attribute" strings: discovery imports neither CuPy nor
cuDNN. The availability probe first loads the CUDA driver library (a dlopen: without a driver it
answers in well under a millisecond, and CuPy is never imported), then asks CuPy, once, when the
backend is first considered; without a GPU it answers "no CUDA GPU is visible" and nothing else runs. Torch CUDA tensors cross zero-copy
through DLPack. TF32 is off for float32 unless ``set_tf32(True)`` or ALGOSWAP_CUDA_TF32=1.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from algoswap import MemorySpace, Ref

__version__ = "0.1.0"
__all__ = ["CUDA_MEMORY", "ENGINES", "algoswap_api_version", "algoswap_register", "set_tf32"]

BACKEND = "cuda"
F32 = ("float32",)
OWN = ("float32", "float64")
# Legacy cudnnConvolutionFwdAlgo_t name -> cuDNN 9 engine global index of a forward convolution graph (DIRECT
# was never implemented, so the engines after GEMM are the legacy values minus one); here, so that listing them
# imports nothing, and read by _cudnn.
ENGINES = {"implicit_gemm": 0, "implicit_precomp_gemm": 1, "gemm": 2, "fft": 3, "fft_tiling": 4,
           "winograd": 5, "winograd_nonfused": 6}
CUDA_MEMORY = MemorySpace(
    "cuda", "cupy.ndarray",
    to_host=f"{__name__}._runtime:to_host", from_host=f"{__name__}._runtime:from_host",
    from_dlpack=f"{__name__}._runtime:from_dlpack",
    description="C-contiguous CuPy arrays in the memory of the current CUDA device",
)
_TF32_NOTE = " TF32 when enabled."
# FFT and Winograd engines mix many inputs into each intermediate (one NaN or inf may make other outputs NaN);
# guess and find may pick one of them.
SPREADS = "spreads"
FUSED_WINOGRAD_REASON = ("cuDNN 9 builds no fused Winograd engine (engine 5, the legacy WINOGRAD) for float32 on "
                         "Hopper GPUs (H200, cuDNN 9.19: refused for every layer tried; benchmarks/cuda_engines.py); "
                         "winograd_nonfused is offered")


def set_tf32(enabled: bool | None) -> None:
    """Allow TF32 tensor cores for float32 (True), forbid them (False) or follow ALGOSWAP_CUDA_TF32 (None)."""
    from ._runtime import set_tf32 as set_

    set_(enabled)


def _driver_missing() -> str:
    """Why the CUDA driver library does not load ("" if it does): checked before CuPy is imported."""
    if sys.platform == "darwin":
        return "macOS has no CUDA driver"
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return f"no CUDA driver: {name} does not load ({exc})"
    return ""


def probe() -> bool | str:
    missing = _driver_missing()
    if missing:
        return missing
    try:
        from ._runtime import probe as run_probe
    except ImportError as exc:
        return f"CuPy is not installed (install algoswap-cuda[cu12] or algoswap-cuda[cu13]): {exc}"
    return run_probe()


def algoswap_api_version() -> str:
    return ">=1,<2"


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cuda", memory=CUDA_MEMORY, priority=30, probe=probe,
                         description="cuDNN engines, cuBLAS and CuPy kernels on an NVIDIA GPU (CuPy arrays)")
    _register_conv(registry)
    _register_others(registry)


def _register_conv(registry: Any) -> None:
    for op in ("conv2d", "conv2d_fused"):
        _register_forward(registry, op)
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    for op in ("conv2d_grad_input", "conv2d_grad_weight"):
        add(op, "guess", BACKEND, f"{conv}:{op}", dtypes=F32, priority=20, supports=Ref(f"{__name__}.conv:supports_cudnn", "guess"),
            kernel=Ref(f"{__name__}.conv:kernel_cudnn", "guess"), description="cuDNN's heuristic pick." + _TF32_NOTE, nan=SPREADS)
        add(op, "smm", BACKEND, f"{conv}:{op}_smm", dtypes=OWN, priority=5, kernel=Ref(f"{__name__}.conv:kernel_smm"),
            description="cuBLAS batched GEMM with im2col / col2im as a gather / scatter-add." + _TF32_NOTE)
    add("conv2d_grad_bias", "direct", BACKEND, f"{conv}:conv2d_grad_bias", dtypes=OWN, kernel="CuPy sum reduction")


def _register_forward(registry: Any, op: str) -> None:
    """Every forward convolution algorithm, for conv2d and for its fused twin (the conv2d, then bias,
    residual and relu in one element-wise pass)."""
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    fused = op == "conv2d_fused"
    then = " Then bias, residual and relu in one element-wise pass." if fused else ""

    def function(name: str) -> str:
        return f"{conv}:conv2d_{name}_fused" if fused else f"{conv}:conv2d_{name}"

    add(op, "guess", BACKEND, function("guess"), dtypes=F32, priority=20,
        supports=Ref(f"{__name__}.conv:supports_cudnn", "guess"), kernel=Ref(f"{__name__}.conv:kernel_cudnn", "guess"),
        description="cuDNN's heuristic pick among its engines (no TF32 engines unless TF32 is on)." + _TF32_NOTE + then,
        nan=SPREADS)
    add(op, "find", BACKEND, function("find"), dtypes=F32, priority=15,
        supports=Ref(f"{__name__}.conv:supports_cudnn", "find"), kernel=Ref(f"{__name__}.conv:kernel_cudnn", "find"),
        description="cuDNN's first sixteen qualifying ranked engines timed once per layer, the fastest kept (like cudnnFind)."
        + _TF32_NOTE + then, nan=SPREADS)
    for name, engine in ENGINES.items():
        if name == "winograd":
            registry.declare_unsupported(op, name, BACKEND, FUSED_WINOGRAD_REASON)
            continue
        add(op, name, BACKEND, function(name), dtypes=F32, priority=10,
            supports=Ref(f"{__name__}.conv:supports_cudnn", name), kernel=Ref(f"{__name__}.conv:kernel_cudnn", name),
            description=f"cuDNN engine {engine}, the legacy CUDNN_CONVOLUTION_FWD_ALGO_{name.upper()} (plain float32)" + then,
            nan=SPREADS if name.startswith(("fft", "winograd")) else "exact")
    add(op, "smm", BACKEND, function("smm"), dtypes=OWN, priority=5,
        kernel=Ref(f"{__name__}.conv:{'kernel_fused' if fused else 'kernel_smm'}"),
        description="im2col gather + cuBLAS batched GEMM." + _TF32_NOTE + then)
    direct = "CuPy raw kernel conv2d_direct (one thread per output)"
    add(op, "direct", BACKEND, function("direct"), dtypes=OWN, priority=0,
        kernel=Ref(f"{__name__}.conv:kernel_fused", direct) if fused else direct,
        description="our direct-convolution CUDA kernel" + then)


def _register_others(registry: Any) -> None:
    add = registry.add_implementation
    for op in ("linear", "linear_grad_input", "linear_grad_weight"):
        add(op, "gemm", BACKEND, f"{__name__}.linear:{op}", dtypes=OWN, kernel=Ref(f"{__name__}.linear:kernel"),
            description="cuBLAS GEMM." + _TF32_NOTE)
    add("linear_grad_bias", "direct", BACKEND, f"{__name__}.linear:linear_grad_bias", dtypes=OWN, kernel="CuPy sum reduction")
    for op in ("maxpool2d", "maxpool2d_grad", "avgpool2d", "avgpool2d_grad", "adaptiveavgpool2d", "adaptiveavgpool2d_grad"):
        add(op, "direct", BACKEND, f"{__name__}.pool:{op}", dtypes=OWN, kernel=Ref(f"{__name__}.pool:kernel"))
    for op in ("relu", "relu_grad", "sigmoid", "sigmoid_grad", "tanh", "tanh_grad", "leaky_relu", "leaky_relu_grad"):
        add(op, "direct", BACKEND, f"{__name__}.activation:{op}", dtypes=OWN, kernel="CuPy element-wise kernel")
    for op in ("batchnorm2d", "batch_norm_train", "batch_norm_train_grad_input", "batch_norm_train_grad_weight",
               "batch_norm_train_grad_bias", "layer_norm", "layer_norm_grad_input", "layer_norm_grad_weight",
               "layer_norm_grad_bias"):
        add(op, "direct", BACKEND, f"{__name__}.norm:{op}", dtypes=OWN, kernel="CuPy element-wise kernels and reductions")
    for op in ("softmax", "softmax_grad", "log_softmax", "log_softmax_grad"):
        add(op, "direct", BACKEND, f"{__name__}.softmax:{op}", dtypes=OWN, kernel="CuPy element-wise kernels and reductions")
    for op in ("add", "concat", "flatten", "reshape"):
        add(op, "direct", BACKEND, f"{__name__}.shape:{op}", dtypes=OWN, kernel="CuPy")
    _register_op_set(registry)


# The rest of the op set, one module per family as in the NumPy reference: each op's function is the
# module attribute of the same name ("slice" is slicing.slice_), as "direct" (matmul's as "gemm").
_MODULES = {
    "arith": ("sub", "sub_grad_b", "mul", "mul_grad", "div", "div_grad_a", "div_grad_b", "neg", "sqrt", "sqrt_grad",
              "rsqrt", "rsqrt_grad", "add_scalar", "mul_scalar", "rdiv_scalar", "rdiv_scalar_grad", "pow_scalar",
              "pow_scalar_grad"),
    "matmul": ("matmul", "matmul_grad_a", "matmul_grad_b", "batch_matmul", "batch_matmul_grad_a", "batch_matmul_grad_b"),
    "reduce": ("reduce_sum", "reduce_sum_grad", "reduce_mean", "reduce_mean_grad", "broadcast_to", "sum_to_shape"),
    "slicing": ("slice_grad", "pad", "pad_grad"),
    "norm": ("instance_norm", "instance_norm_grad_input", "instance_norm_grad_weight", "instance_norm_grad_bias"),
    "dropout": ("dropout", "dropout_grad", "dropout2d", "dropout2d_grad"),
    "loss": ("softmax_cross_entropy", "softmax_cross_entropy_grad", "binary_cross_entropy", "binary_cross_entropy_grad"),
    "indexing": ("where", "where_grad", "embedding", "embedding_grad"),
    "sparse": ("csrmv", "csrmm", "csrmm_grad_dense"),
    "optim": tuple(f"{name}_update{kind}" for kind in ("", "_sparse") for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")),
}
_KERNELS = {"arith": "CuPy element-wise kernel", "matmul": "cuBLAS GEMM (cupy.matmul)." + _TF32_NOTE,
            "reduce": "CuPy reduction", "slicing": "CuPy copy / scatter-add", "norm": "CuPy element-wise kernels and reductions",
            "dropout": "CuPy element-wise kernel drawing the spec's splitmix64 mask", "loss": "CuPy element-wise kernels and reductions",
            "indexing": "CuPy gather / scatter-add", "sparse": "cuSPARSE SpMV (cupyx.scipy.sparse)",
            "optim": "one CuPy element-wise kernel, in place"}
_CSRMM_KERNEL = "CuPy raw kernel csrmm (one thread per output, summing the stored entries of its row of the CSR matrix)"
_OP_KERNELS = {"csrmm": _CSRMM_KERNEL, "csrmm_grad_dense": _CSRMM_KERNEL}
ANY_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
_ANY_DTYPE = {"slice": "slicing:slice_", "split": "slicing:split", "transpose": "slicing:transpose",
              "zeros_like": "arith:zeros_like", "ones_like": "arith:ones_like"}


def _register_op_set(registry: Any) -> None:
    add = registry.add_implementation
    for module, ops in _MODULES.items():
        for op in ops:
            add(op, "gemm" if module == "matmul" else "direct", BACKEND, f"{__name__}.{module}:{op}", dtypes=OWN,
                kernel=_OP_KERNELS.get(op, _KERNELS[module]))
    for op, function in _ANY_DTYPE.items():
        add(op, "direct", BACKEND, f"{__name__}.{function}", dtypes=ANY_DTYPES, kernel="CuPy copy")
    add("one_hot", "direct", BACKEND, f"{__name__}.indexing:one_hot", dtypes=ANY_DTYPES[1:6], kernel="CuPy eye[indices]")
