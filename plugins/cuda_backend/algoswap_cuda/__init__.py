"""The CUDA backend of algoswap: cuDNN convolution engines through NVIDIA's cuDNN frontend, cuBLAS
through CuPy, and our own CuPy raw kernels, on CuPy arrays in GPU memory.

Implementations are registered as "module:attribute" strings: discovery imports neither CuPy nor
cuDNN. The availability probe first loads the CUDA driver library (a dlopen: without a driver it
answers in well under a millisecond, and CuPy is never imported), then asks CuPy, once, when the
backend is first considered; without a GPU it answers "no CUDA GPU is visible" and nothing else runs. Torch CUDA tensors cross zero-copy
through DLPack. TF32 for float32: ``set_tf32`` first, then ALGOSWAP_CUDA_TF32 ("1" or "0"), then the caller's
wish (a swapped torch model follows torch's own switches), else off (the functional API's default). ``guess``
chooses its engine by timing, as ``find`` does, where ``set_benchmark``, else ALGOSWAP_CUDA_BENCHMARK, else the
caller's wish (``torch.backends.cudnn.benchmark`` for a swapped torch model) says so; else cuDNN's heuristic pick.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from algoswap import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, MemorySpace, Ref

__version__ = "0.1.0"
__all__ = ["CUDA_MEMORY", "ENGINES", "algoswap_api_version", "algoswap_register", "set_benchmark", "set_tf32"]

BACKEND = "cuda"
OWN = ("float32", "float64")
# cuDNN's convolutions: the half precisions (tensor cores, accumulating in float32; forward in NHWC) and float32
CUDNN = ("float16", "bfloat16", "float32")
# The named engines that build for fewer dtypes (H200, cuDNN 9.19: the FFT engines refuse bfloat16, Winograd both halves)
ENGINE_DTYPES = {"fft": ("float16", "float32"), "fft_tiling": ("float16", "float32"), "winograd_nonfused": ("float32",)}
FLOATS = FLOAT_DTYPES  # float16, bfloat16 (ml_dtypes' numpy dtype, which CuPy takes), float32, float64
# Legacy cudnnConvolutionFwdAlgo_t name -> cuDNN 9 engine global index of a forward convolution graph (DIRECT
# was never implemented, so the engines after GEMM are the legacy values minus one); here, so that listing them
# imports nothing, and read by _cudnn.
ENGINES = {"implicit_gemm": 0, "implicit_precomp_gemm": 1, "gemm": 2, "fft": 3, "fft_tiling": 4,
           "winograd": 5, "winograd_nonfused": 6}
CUDA_MEMORY = MemorySpace(
    "cuda", "cupy.ndarray",
    to_host=f"{__name__}._runtime:to_host", from_host=f"{__name__}._runtime:from_host",
    from_dlpack=f"{__name__}._runtime:from_dlpack", capture=f"{__name__}._graphs:capture",
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
    """Allow TF32 tensor cores for float32 (True), forbid them (False), or leave it to ALGOSWAP_CUDA_TF32 and then
    to the caller (None: a swapped torch model follows torch's switches; the functional API's default is off)."""
    from ._runtime import set_tf32 as set_

    set_(enabled)


def set_benchmark(enabled: bool | None) -> None:
    """Let ``guess`` (the default convolution) choose its cuDNN engine by timing, as ``find`` does (True), keep
    cuDNN's heuristic pick (False), or leave it to ALGOSWAP_CUDA_BENCHMARK and then to the caller (None: a swapped
    torch model follows ``torch.backends.cudnn.benchmark``; the functional API's default is the heuristic pick)."""
    from ._runtime import set_benchmark as set_

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
    return ">=1.1,<2"  # add_family


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cuda", memory=CUDA_MEMORY, priority=30, probe=probe,
                         description="cuDNN engines, cuBLAS and CuPy kernels on an NVIDIA GPU (CuPy arrays)")
    for op in ("conv2d", "conv2d_fused"):
        _register_forward(registry, op)
    for family, kernel in _KERNELS.items():
        registry.add_family(f"{__name__}.{family}", BACKEND, algorithm="gemm" if family in ("linear", "matmul") else "direct",
                            dtypes=_FAMILY_DTYPES.get(family, FLOATS), kernel=kernel, overrides=_OPS)
    _register_smm_gradients(registry)


def _register_smm_gradients(registry: Any) -> None:
    """The convolution gradients' second algorithm (the conv family has their first: guess)."""
    conv = f"{__name__}.conv"
    for op in ("conv2d_grad_input", "conv2d_grad_weight"):
        registry.add_implementation(op, "smm", BACKEND, f"{conv}:{op}_smm", dtypes=OWN, priority=5, kernel=Ref(f"{conv}:kernel_smm"),
                                    description="cuBLAS batched GEMM with im2col / col2im as a gather / scatter-add." + _TF32_NOTE)


def _register_forward(registry: Any, op: str) -> None:
    """Every forward convolution algorithm, for conv2d and for its fused twin (the conv2d, then bias,
    residual and activation in one element-wise pass)."""
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    fused = op == "conv2d_fused"
    then = " Then bias, residual and activation in one element-wise pass." if fused else ""

    def function(name: str) -> str:
        return f"{conv}:conv2d_{name}_fused" if fused else f"{conv}:conv2d_{name}"

    add(op, "guess", BACKEND, function("guess"), dtypes=CUDNN, priority=20, layout="any",
        supports=Ref(f"{conv}:supports_cudnn", "guess"), kernel=Ref(f"{conv}:kernel_cudnn", "guess"),
        description="cuDNN's heuristic pick among its engines (no TF32 engines unless TF32 is on); in benchmark mode "
        "(torch.backends.cudnn.benchmark, ALGOSWAP_CUDA_BENCHMARK) find's timed pick." + _TF32_NOTE + then,
        nan=SPREADS)
    add(op, "find", BACKEND, function("find"), dtypes=CUDNN, priority=15, layout="any",
        supports=Ref(f"{conv}:supports_cudnn", "find"), kernel=Ref(f"{conv}:kernel_cudnn", "find"),
        description="cuDNN's first sixteen qualifying ranked engines timed once per layer, the fastest kept (like cudnnFind)."
        + _TF32_NOTE + then, nan=SPREADS)
    for name, engine in ENGINES.items():
        if name == "winograd":
            registry.declare_unsupported(op, name, BACKEND, FUSED_WINOGRAD_REASON)
            continue
        add(op, name, BACKEND, function(name), dtypes=ENGINE_DTYPES.get(name, CUDNN), priority=10, layout="any",
            supports=Ref(f"{conv}:supports_cudnn", name), kernel=Ref(f"{conv}:kernel_cudnn", name),
            description=f"cuDNN engine {engine}, the legacy CUDNN_CONVOLUTION_FWD_ALGO_{name.upper()} (plain float32)" + then,
            nan=SPREADS if name.startswith(("fft", "winograd")) else "exact")
    add(op, "smm", BACKEND, function("smm"), dtypes=OWN, priority=5,
        kernel=Ref(f"{conv}:{'kernel_fused' if fused else 'kernel_smm'}"),
        description="im2col gather + cuBLAS batched GEMM." + _TF32_NOTE + then)
    direct = "CuPy raw kernel conv2d_direct (one thread per output)"
    add(op, "direct", BACKEND, function("direct"), dtypes=OWN, priority=0,
        kernel=Ref(f"{conv}:kernel_fused", direct) if fused else direct,
        description="our direct-convolution CUDA kernel" + then)


_ELEMENTWISE = "CuPy element-wise kernel (float16 and bfloat16: one raw kernel each, computing in float32)"
_REDUCING = "CuPy element-wise kernels and reductions (float16 and bfloat16: computed in float32, rounded once)"
_SUM = "CuPy sum reduction"
_IN_FLOAT32 = " (float16 and bfloat16: computed in float32, rounded once)"
# family (its module mirrors the core's spec module) -> the kernel its ops run ("gemm" for linear and matmul,
# else "direct"; their dtypes: _FAMILY_DTYPES, else FLOATS)
_KERNELS: dict[str, Any] = {
    "conv": _SUM, "linear": Ref(f"{__name__}.linear:kernel"), "pool": Ref(f"{__name__}.pool:kernel"),
    "activation": _ELEMENTWISE, "norm": _REDUCING, "softmax": _REDUCING, "elementwise": "CuPy", "shape": "CuPy",
    "arith": "CuPy element-wise kernel (float16 and bfloat16: the binary ops, neg and sqrt on the arrays as they are, "
             "the others computed in float32, rounded once)",
    "matmul": Ref(f"{__name__}.matmul:kernel"), "reduce": "CuPy reduction (float16 and bfloat16: accumulating in float32)",
    "slicing": "CuPy copy / scatter-add" + _IN_FLOAT32, "dropout": "CuPy element-wise kernel drawing the spec's splitmix64 mask" + _IN_FLOAT32,
    "loss": _REDUCING, "indexing": "CuPy gather / scatter-add" + _IN_FLOAT32, "sparse": "cuSPARSE SpMV (cupyx.scipy.sparse)",
    "optim": "one CuPy element-wise kernel, in place (float16 and bfloat16: updated in float32, rounded once)",
    "attention": "cuBLAS strided-batched GEMM around one softmax kernel (CuPy's with a mask)." + _TF32_NOTE,
    "resample": "CuPy raw kernel interpolate (one thread per output; the gradient scatters with atomicAdd, in float32 for "
                "float16 and bfloat16)",
}
# family -> its dtypes where not FLOATS: the conv family's own (its cuDNN gradients: _GUESS) and cupyx.scipy.sparse (no half types)
_FAMILY_DTYPES = {"conv": OWN, "sparse": OWN}
_COPY = {"dtypes": ALL_DTYPES, "kernel": "CuPy copy"}
_CSRMM = {"kernel": "CuPy raw kernel csrmm (one thread per output, summing the stored entries of its row of the CSR matrix)"}
_GUESS = {"algorithm": "guess", "dtypes": CUDNN, "priority": 20, "supports": Ref(f"{__name__}.conv:supports_cudnn", "guess"),
          "kernel": Ref(f"{__name__}.conv:kernel_cudnn", "guess"), "description": "cuDNN's heuristic pick." + _TF32_NOTE,
          "nan": SPREADS}
_LINEAR = {"description": "cuBLAS GEMM." + _TF32_NOTE}
_LINEAR_FORWARD = {"description": "cuBLAS GEMM; with a bias, in float32, float16 and bfloat16, one cuBLASLt matmul adding it in "
                                  "its epilogue where cuBLASLt has an algorithm (else a raw kernel after the GEMM)." + _TF32_NOTE}
_HALF_STORED = " (float16 and bfloat16 read and written as they are, computed in float32)"
# ops that take their inputs in any memory order and keep a channels-last input's order in their output (no copy
# between the NHWC convolutions of a half-precision model and these)
_ANY_ORDER = {"layout": "any"}
_KEEPS_ORDER = ("maxpool2d", "avgpool2d", "adaptiveavgpool2d", "neg", "sqrt", "rsqrt", "add_scalar", "mul_scalar",
                "rdiv_scalar", "pow_scalar", "clamp_min", "relu", "sigmoid", "tanh", "leaky_relu", "hardtanh", "silu",
                "gelu", "hardswish", "hardsigmoid", "elu", "mish")
_BINARY = {"layout": "any", "kernel": "CuPy element-wise kernel, on the arrays as they are in float16 and bfloat16 (computing in "
           "float32); a channels-last operand's NHWC memory in its order, x op s for s per (image, channel) one raw "
           "kernel (16 bytes of channels per thread)"}
# op -> how it differs from its family's defaults
_OPS: dict[str, dict[str, Any]] = {
    "conv2d_grad_input": _GUESS, "conv2d_grad_weight": _GUESS,
    "linear": _LINEAR_FORWARD, "linear_grad_input": _LINEAR,
    "linear_grad_weight": _LINEAR,
    "matmul": {"layout": "any"}, "batch_matmul": {"layout": "any"},  # transposed views read by cuBLAS as they are
    "linear_grad_bias": {"algorithm": "direct", "kernel": _SUM},
    "slice": _COPY, "split": _COPY,
    "transpose": {"dtypes": ALL_DTYPES, "layout": "any", "kernel": "none: a CuPy view with its strides permuted (copied by the "
                  "next op where it needs C-contiguous memory)"}, "zeros_like": _COPY, "ones_like": _COPY,
    "one_hot": {"dtypes": tuple(dtype for dtype in ALL_DTYPES if dtype in INT_DTYPES), "kernel": "CuPy eye[indices]"},
    "csrmm": _CSRMM, "csrmm_grad_dense": _CSRMM,
    "batchnorm2d": {"kernel": "one CuPy raw kernel: x * scale + shift per channel (_passes)" + _HALF_STORED},
    "batchnorm2d_fused": {"kernel": "one CuPy raw kernel: x * scale + shift per channel, then the activation, in one pass (_passes)"
                          + _HALF_STORED},
    "layer_norm": {"kernel": "one CuPy raw kernel, two-pass: a warp per row of up to 4096 values (16-byte loads where the rows "
                             "allow: _vectorised), a block of threads per longer row (_passes)" + _HALF_STORED},
    "concat": {"kernel": "one CuPy raw kernel copying every input (CuPy's concatenate past 64 inputs)"},
    **{op: _ANY_ORDER for op in _KEEPS_ORDER}, **{op: _BINARY for op in ("sub", "mul", "div")},
    "add": {**_BINARY, "kernel": "one raw kernel with 16-byte loads for two C-contiguous arrays of one shape (_vectorised), "
            "else as sub, mul and div: " + _BINARY["kernel"]},
    "scaled_dot_product_attention": {
        "layout": "any", "kernel": Ref(f"{__name__}.attention:kernel"),
        "description": "cuDNN's fused attention (flash, inference; q, k, v read with their strides) in float16 and bfloat16 "
                       "without a mask or with is_causal, where cuDNN builds it; else cuBLAS strided-batched GEMM around one "
                       "softmax kernel (CuPy's with a mask)." + _TF32_NOTE},
    "softmax": {"kernel": "one CuPy raw kernel over the last axis, a warp per row of up to 4096 values (16-byte loads where "
                          "the rows allow), a block of threads per longer row" + _HALF_STORED
                + " (CuPy reductions over another)"},
}
