"""The oneDNN backend of algoswap: float32 convolution, matmul, pooling, eltwise, normalisation,
softmax, binary, reduction, resampling, reorder and concat primitives on the CPU.

Implementations are registered as "module:attribute" strings, so discovery imports neither the
compiled extension nor libdnnl; the availability probe loads them, once, when the backend is first
considered. Primitives are made once per shape and attributes, cached, and shared by threads.
"""

from __future__ import annotations

import functools
from typing import Any

from algoswap import FAMILIES, Ref

from ._settings import set_layout

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register", "runs_bfloat16", "set_layout"]

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


@functools.cache
def runs_bfloat16() -> bool | str:
    """True if oneDNN runs bfloat16 on this CPU, else why not: its refusal of a bfloat16 convolution (3x3, 64
    channels, channels-last, as a swap_backend model runs it), asked once and cached. The bfloat16 predicates ask
    oneDNN call by call; this is the one answer for the CPU, for what must know before a call (the tests skip
    their bfloat16 cases with it). Loads the extension on its first call, never at registration."""
    available = probe()
    if available is not True:
        return f"dnnl unavailable: {available}"
    from ._ext import dnnl, refusal

    reason = refusal(lambda: dnnl.conv2d_forward_impl([1, 64, 28, 28], [64, 64, 3, 3], False, False, stride=[1, 1],
                                                     padding_l=[1, 1], padding_r=[1, 1], dilation=[1, 1], groups=1,
                                                     channels_last=True, dtype="bfloat16"), "bfloat16")
    return True if reason is True else f"oneDNN refuses a bfloat16 convolution on this CPU: {reason}"


def algoswap_api_version() -> str:
    return ">=1.1,<2"  # add_family


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cpu", priority=10, probe=probe,
                         description="oneDNN 3.2 primitives on the CPU (float32, host memory)")
    _register_conv(registry)
    for family, predicate in _FAMILIES.items():
        module = f"{__name__}.{family}"
        registry.add_family(module, BACKEND, algorithm="gemm" if family in ("linear", "matmul") else "direct", dtypes=F32,
                            supports=f"{module}:{predicate}" if predicate else None, kernel=Ref(f"{module}:kernel"),
                            overrides=_options)
    for family, reason in _UNSUPPORTED_FAMILIES.items():
        for op in FAMILIES[family]:
            registry.declare_unsupported(op, "direct", BACKEND, reason)
    for ops, reason in _UNSUPPORTED.items():
        for op in ops.split():
            registry.declare_unsupported(op, "direct", BACKEND, reason)


def _register_conv(registry: Any) -> None:
    """conv2d and conv2d_fused, by algorithm (their gradients are in the conv family)."""
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    for op, what in (("conv2d", ""), ("conv2d_fused", " with the residual add and the activation as post-ops")):
        add(op, "auto", BACKEND, f"{conv}:{op}_auto", dtypes=BF16, priority=20, supports=f"{conv}:supports_auto",
            kernel=Ref(f"{conv}:kernel_auto"), layout="channels_last",
            description=f"oneDNN convolution_auto (the library picks the algorithm){what}")
        add(op, "direct", BACKEND, f"{conv}:{op}_direct", dtypes=BF16, priority=10, supports=f"{conv}:supports",
            kernel=Ref(f"{conv}:kernel"), layout="channels_last", description=f"oneDNN convolution_direct{what}")
        registry.declare_unsupported(op, "winograd", BACKEND, WINOGRAD_REASON)


# The families registered (float32, the module's kernel(), "gemm" for linear and matmul, else "direct") -> the
# module's supports() predicate (None: none)
_FAMILIES = {"conv": "supports", "linear": "supports", "pool": "supports", "activation": None, "norm": "supports",
             "softmax": None, "elementwise": "supports", "shape": None, "arith": "supports", "matmul": "supports",
             "slicing": "supports", "reduce": "supports", "attention": "supports", "resample": "supports"}
_BF16_ANY = {"dtypes": BF16, "layout": "any"}  # forward ops that run in bfloat16 and take channels-last arrays as they are
_ANY = {"layout": "any"}  # float32 ops that take arrays in any memory order as they are
_INSTANCE = {"description": "oneDNN batch normalization of the input seen as (1, N*C, H, W)"}
_GROUP = {"description": "oneDNN batch normalization of the input seen as (1, N*G, C/G * spatial, 1); NumPy's per-channel "
          "weight and bias"}
_ANY = {"layout": "any"}  # float32 forward ops that take channels-last arrays as they are (and keep their order)
# op -> how it differs from its family's defaults
_OPS: dict[str, dict[str, Any]] = {
    "linear": {"dtypes": BF16}, "maxpool2d": _BF16_ANY, "avgpool2d": _BF16_ANY,
    "adaptiveavgpool2d": {**_BF16_ANY, "supports": f"{__name__}.pool:supports_adaptive"}, "interpolate": _ANY,
    "adaptiveavgpool2d_grad": {"supports": f"{__name__}.pool:supports_adaptive"},
    "relu": {**_BF16_ANY, "supports": f"{__name__}.activation:supports_relu"}, "add": _BF16_ANY,
    "batchnorm2d": _ANY, "batchnorm2d_fused": _ANY, "concat": _ANY,
    **{op: _ANY for op in ("hardtanh", "silu", "gelu", "hardswish", "hardsigmoid", "elu", "mish")},
    **{op: _ANY for op in ("sub", "mul", "div", "mul_grad", "div_grad_a", "div_grad_b", "reduce_sum", "reduce_mean",
                           "reduce_max")},
    "transpose": {**_ANY, "description": "oneDNN reorder from the input's memory order (none where that already is the "
                  "output's, or where the input seen through permuted strides is channels-last: that view)"},
    "instance_norm": _INSTANCE, "instance_norm_grad_input": _INSTANCE, "instance_norm_grad_weight": _INSTANCE,
    "group_norm": _GROUP, "group_norm_grad_input": _GROUP, "group_norm_grad_weight": _GROUP,
}
_BIAS_GRADIENT = {"algorithm": "direct", "supports": None, "kernel": BIAS_KERNEL}


def _options(op: str) -> dict[str, Any]:
    return _BIAS_GRADIENT if op.endswith("_grad_bias") else _OPS.get(op, {})


# families no oneDNN 3.2 primitive serves -> why
_UNSUPPORTED_FAMILIES = {
    "indexing": "oneDNN 3.2 has no gather, scatter or select primitive",
    "dropout": "oneDNN 3.2 has no random-number generation (no dropout primitive)",
    "loss": "oneDNN 3.2 has no loss primitive (the loss gathers targets and reduces beyond softmax)",
    "sparse": "oneDNN 3.2 has no sparse (CSR) primitives",
    "optim": "oneDNN 3.2 has no optimizer primitive (an update is several elementwise steps on arrays updated in place)",
}
# other ops no oneDNN 3.2 primitive serves (space-separated) -> why
_UNSUPPORTED = {
    "sum_to_shape": REDUCTION_REASON,
    "reduce_sum_grad reduce_mean_grad broadcast_to": "a broadcast copy: oneDNN 3.2 has no broadcast primitive",
    "reduce_max_grad": "a comparison with the broadcast maximum, a count and a division: oneDNN 3.2 has no primitive for "
                       "the comparison",
    "zeros_like ones_like": "a fill: oneDNN 3.2 has no fill primitive",
    "slice split slice_grad": "a copy into or out of a window: oneDNN 3.2 has no slicing primitive (a reorder of a "
                              "sub-memory could copy it, with NumPy's memory traffic; not mapped)",
    "pad pad_grad": "oneDNN 3.2 has no padding primitive (constant, reflect or replicate)",
    "hardswish_grad hardsigmoid_grad": "oneDNN 3.2's backward decides the kinks on x/6 + 1/2 rounded to float32 (within an "
                                       "ulp below x = 3 it passes grad_output where PyTorch has 1.5x or 1/6 of it) and "
                                       "multiplies grad_output by 0 where PyTorch selects 0 (NaN for an infinite one)",
    "clamp_min_grad": "oneDNN 3.2's clip_v2 backward passes grad_output only where value < input < inf; PyTorch's clamp_min "
                      "passes it wherever input >= value",
    "mish_grad": "oneDNN 3.2's mish backward overflows: +-inf from |x| ~ 1e30 on and at x = +inf, where PyTorch has "
                 "grad_output and NaN",
}
