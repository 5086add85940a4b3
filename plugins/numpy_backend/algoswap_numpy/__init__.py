"""The NumPy reference backend of algoswap: every op, forward and backward, in vectorised NumPy.

It defines what each op means: every other backend is tested against it.
"""

from __future__ import annotations

import importlib
from typing import Any

from algoswap import ALL_DTYPES, FAMILIES, FLOAT_DTYPES, INT_DTYPES, in_float32

from . import comm, conv
from ._half import widened_family

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register"]

BACKEND = "numpy"
# What differs from an op's defaults: every float dtype (half precision computed in float32, _half.py),
# kernel "numpy <op>", "direct" ("gemm" in linear and matmul)
_ANY = {"dtypes": ALL_DTYPES}  # data movement works on any dtype
_CSR = {"dtypes": ("float32", "float64")}  # scipy.sparse matrices hold no half precision
_OPS: dict[str, dict[str, Any]] = {
    "flatten": {**_ANY, "kernel": "numpy reshape"}, "reshape": {**_ANY, "kernel": "numpy reshape"},
    "concat": {**_ANY, "kernel": "numpy concatenate"},
    "slice": _ANY, "split": _ANY, "transpose": _ANY, "zeros_like": _ANY, "ones_like": _ANY,
    "one_hot": {"dtypes": INT_DTYPES, "kernel": "numpy eye[indices]"},
    "linear_grad_bias": {"algorithm": "direct"},
    "conv2d_grad_input": {"kernel": "numpy tap-by-tap scatter"},
    "conv2d_grad_weight": {"kernel": "numpy tap-by-tap tensordot"},
    "conv2d_grad_bias": {"kernel": "numpy sum"},
    "csrmv": _CSR, "csrmm": _CSR, "csrmm_grad_dense": _CSR,
    # communication in a group of one rank (comm.alone): data movement, floats and integers; its gradients compute
    **{op: {"dtypes": FLOAT_DTYPES + INT_DTYPES, "supports": comm.alone} for op in FAMILIES["comm"]},
    "allreduce_grad": {"supports": comm.alone}, "broadcast_grad": {"supports": comm.alone},
    "shard_indices": {"dtypes": INT_DTYPES}, "comm_wait": {"dtypes": FLOAT_DTYPES + INT_DTYPES},
}


def _winograd_supports(call: Any) -> bool | str:
    kernel = call.shape("weight")[2:]
    return conv.winograd_applies(kernel, call.attrs["stride"], call.attrs["dilation"])


def algoswap_api_version() -> str:
    return ">=1.1,<2"  # add_family


def algoswap_register(registry: Any) -> None:
    registry.add_backend(BACKEND, device="cpu", priority=0, reference=True,
                         description="NumPy reference implementations (host memory)")
    _register_conv(registry)
    for family in FAMILIES:  # the reference has a module for every family
        algorithm = "gemm" if family in ("linear", "matmul") else "direct"
        module = widened_family(importlib.import_module(f"{__name__}.{family}"), _computes, registry.spec)
        registry.add_family(module, BACKEND, algorithm=algorithm, overrides=_options)


def _computes(op: str) -> bool:
    """Whether the op serves every float dtype, half precision computed in float32 (else _OPS gives
    its dtypes: data movement, integers, sparse matrices)."""
    return "dtypes" not in _OPS.get(op, {})


def _options(op: str) -> dict[str, Any]:
    return {"kernel": f"numpy {op}", "dtypes": FLOAT_DTYPES, **_OPS.get(op, {})}


def _register_conv(registry: Any) -> None:
    """conv2d and conv2d_fused, by algorithm (their gradients are in the conv family)."""
    add = registry.add_implementation
    # Winograd tiles and FFTs mix many inputs into each intermediate: one NaN or inf may make others NaN.
    algorithms = (
        ("smm", conv.conv2d_smm, 30, None, "numpy im2col + matmul (BLAS gemm)", "exact"),
        ("winograd", conv.conv2d_winograd, 20, _winograd_supports, "numpy Winograd F(2x2,3x3) tiles", "spreads"),
        ("direct", conv.conv2d_direct, 10, None, "numpy tap-by-tap tensordot", "exact"),
        ("fft", conv.conv2d_fft, 0, None, "numpy rfft2 pointwise products", "spreads"),
    )
    for algorithm, function, priority, supports, kernel, nan in algorithms:
        add("conv2d", algorithm, BACKEND, in_float32(function), dtypes=FLOAT_DTYPES, priority=priority, supports=supports,
            kernel=kernel, nan=nan)
        add("conv2d_fused", algorithm, BACKEND, in_float32(conv.fused(function)), dtypes=FLOAT_DTYPES, priority=priority,
            supports=supports, kernel=f"{kernel}, then the add and activation in place", nan=nan)
