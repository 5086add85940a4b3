"""Cases spanning each op's attribute space, shared by the conformance suite and the benchmarks.

A case is (input shapes, attributes); the arrays are drawn fresh for every test run.
"""

from __future__ import annotations

import math
from typing import Any

from algoswap import FUSED_ACTIVATIONS
from ._cases_ops import COMM, COMM_GRADIENT_BUILDERS, GEMM_OPS, OPS_FORWARD, OPS_GRADIENT_BUILDERS, OPTIMIZER_ATTRS  # noqa: F401
from ._inputs import Arg, bind, draw, dtype_of, shape_of  # noqa: F401 (the harness imports them from here)

Case = tuple[tuple[Any, ...], dict[str, Any]]


CONV2D: list[Case] = [
    (((2, 3, 9, 11), (4, 3, 3, 3), (4,)), {"padding": 1}),
    (((1, 2, 7, 5), (3, 2, 3, 3), (3,)), {"padding": 1}),
    (((2, 4, 10, 9), (6, 4, 3, 3), None), {"stride": 2, "padding": (1, 2), "dilation": (2, 1)}),
    (((2, 4, 8, 8), (6, 2, 3, 3), (6,)), {"groups": 2, "padding": 1}),
    (((1, 6, 9, 9), (6, 1, 3, 3), (6,)), {"groups": 6, "padding": 1, "stride": 2}),
    (((1, 3, 10, 9), (5, 3, 4, 2), (5,)), {"padding": "same", "dilation": 2}),
    (((2, 3, 7, 8), (2, 3, 3, 3), None), {"padding": "valid"}),
    (((1, 2, 8, 7), (3, 2, 3, 3), (3,)), {"padding": ((1, 0), (2, 1))}),
    (((1, 2, 8, 7), (3, 2, 3, 3), (3,)), {"padding": 2, "padding_mode": "reflect"}),
    (((1, 2, 8, 7), (3, 2, 3, 3), (3,)), {"padding": (1, 2), "padding_mode": "replicate"}),
    (((1, 2, 8, 7), (3, 2, 3, 3), (3,)), {"padding": 2, "padding_mode": "circular", "stride": (2, 1)}),
    (((2, 5, 9, 7), (4, 5, 1, 1), (4,)), {"stride": 3}),
    (((1, 3, 12, 13), (4, 3, 5, 5), (4,)), {"padding": 2, "stride": (1, 2)}),
    (((1, 3, 6, 6), (2, 3, 6, 6), (2,)), {}),
]

LINEAR: list[Case] = [
    (((5, 7), (4, 7), (4,)), {}),
    (((2, 3, 7), (4, 7), None), {}),
    (((7,), (3, 7), (3,)), {}),
    (((2, 1, 3, 6), (5, 6), (5,)), {}),
]

MAXPOOL2D: list[Case] = [
    (((2, 3, 9, 9),), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (((1, 2, 11, 10),), {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True}),
    (((2, 2, 7, 7),), {"kernel_size": 2, "ceil_mode": True}),
    (((1, 3, 8, 6),), {"kernel_size": (2, 3)}),
    (((1, 1, 10, 9),), {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True}),
]

AVGPOOL2D: list[Case] = [
    (((2, 3, 9, 9),), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (((2, 3, 9, 9),), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    (((1, 2, 7, 8),), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True}),
    (((1, 2, 7, 8),), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True, "count_include_pad": False}),
    (((2, 2, 6, 6),), {"kernel_size": 2, "divisor_override": 3}),
]

ADAPTIVE: list[Case] = [
    (((2, 3, 7, 5),), {"output_size": (3, 2)}),
    (((1, 2, 4, 4),), {"output_size": 6}),
    (((1, 2, 9, 8),), {"output_size": (None, 3)}),
    (((2, 4, 8, 8),), {"output_size": 1}),
]

ELEMENTWISE: list[Case] = [(((3, 4, 5),), {}), (((2, 3, 7, 6),), {}), (((11,),), {})]

FLATTEN: list[Case] = [
    (((2, 3, 4, 5),), {}),
    (((2, 3, 4, 5),), {"start_dim": 0, "end_dim": 2}),
    (((2, 3, 4, 5),), {"start_dim": -2, "end_dim": -1}),
    (((6,),), {"start_dim": 0}),
]

ADD: list[Case] = [
    (((2, 3, 4, 5), (2, 3, 4, 5)), {}),
    (((2, 3, 4, 5), (3, 1, 1)), {}),
    (((4, 1), (3,)), {}),
    (((1,), (2, 3)), {}),
    (((2, 1, 5), (1, 4, 1)), {}),
]

CONCAT: list[Case] = [
    (((2, 3, 4, 5), (2, 2, 4, 5)), {"axis": 1}),
    (((2, 3), (1, 3), (4, 3)), {}),
    (((2, 3, 4), (2, 3, 1)), {"axis": -1}),
    (((3, 5),), {"axis": 1}),
    (tuple((2, k % 3 + 1, 3, 2) for k in range(24)), {"axis": 1}),  # DenseNet's: many inputs in one call
    (tuple((1, 2) for _ in range(70)), {"axis": 0}),  # past the CUDA kernel's 64 inputs
]

RESHAPE: list[Case] = [
    (((2, 3, 4, 5),), {"shape": (2, -1)}),
    (((2, 3, 4, 5),), {"shape": (6, 20)}),
    (((24,),), {"shape": (2, 3, -1, 1)}),
    (((2, 6),), {"shape": -1}),
]

# eps is large so that running_var (standard normal draws) plus eps stays positive
BATCHNORM2D: list[Case] = [
    (((2, 3, 5, 4), (3,), (3,), (3,), (3,)), {"eps": 10.0}),
    (((1, 4, 3, 3), (4,), (4,), None, None), {"eps": 10.0}),
    (((2, 2, 4, 6), (2,), (2,), (2,), None), {"eps": 12.5}),
]

LEAKY_RELU: list[Case] = [(((3, 4, 5),), {}), (((2, 3, 7, 6),), {"negative_slope": 0.2}), (((11,),), {"negative_slope": -1.5})]
# activations with kinks or saturations away from 0: one case of wide inputs (normal times 4) reaches them
ACTIVATION: list[Case] = [(((3, 4, 5),), {}), ((Arg((2, 3, 7, 6), "wide"),), {}), (((11,),), {})]
HARDTANH: list[Case] = [(((3, 4, 5),), {}), ((Arg((2, 3, 7, 6), "wide"),), {"min_val": 0.0, "max_val": 6.0}),
                        (((11,),), {"min_val": -0.5, "max_val": 0.25}), (((2, 5),), {"min_val": 0.5, "max_val": 0.5})]
# The tanh form gets no wide inputs: below x = -6.6 its gradient is exactly 0 in torch's formula (1 + tanh(u)
# and 1 - tanh(u)**2 round to 0), where ours keeps its digits (a sigmoid), so that inf * it is NaN in torch only.
GELU: list[Case] = [(((3, 4, 5),), {}), ((Arg((2, 3, 7, 6), "wide"),), {}), (((11,),), {"approximate": "tanh"}),
                    (((2, 3, 7, 6),), {"approximate": "tanh"})]
ELU: list[Case] = [(((3, 4, 5),), {}), ((Arg((2, 3, 7, 6), "wide"),), {"alpha": 0.5}), (((11,),), {"alpha": -1.5})]

SOFTMAX: list[Case] = [
    (((3, 7),), {}),
    (((2, 5, 3),), {"axis": 1}),
    (((2, 3, 4, 5),), {"axis": 0}),
    (((4, 3, 5),), {"axis": -2}),
    (((9,),), {"axis": -1}),
    (((3, 700),), {}),  # rows longer than a block of threads
]

LAYER_NORM: list[Case] = [
    (((4, 7), (7,), (7,)), {}),
    (((2, 3, 5), None, None), {}),
    (((2, 3, 5), (5,), None), {"eps": 1e-3}),
    (((3, 4, 5), (4, 5), (4, 5)), {"normalized_ndim": 2}),
    (((2, 3, 4, 3), None, None), {"normalized_ndim": 2, "eps": 0.0}),
    (((3, 5), None, (3, 5)), {"normalized_ndim": 2}),
    (((3, 1000), (1000,), (1000,)), {}),  # rows longer than a block of threads
]

BATCH_NORM_TRAIN: list[Case] = [
    (((2, 3, 5, 4), (3,), (3,)), {}),
    (((3, 4, 3, 3), None, None), {}),
    (((2, 2, 4, 3), (2,), None), {"eps": 1e-3}),
    (((5, 3, 1, 1), None, (3,)), {"eps": 0.1}),
]


def _interpolate_grad_attrs(shape: tuple[int, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    """interpolate_grad's attributes for a forward case: the canonical ones (the scale factor that maps coordinates)."""
    canonical = bind("interpolate", (shape,), "float64", attrs).attrs
    return {"input_size": shape, **{k: canonical[k] for k in ("scale_factor", "mode", "align_corners")}}


def _only(attrs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k in names}


# nearest, bilinear and bicubic, up and down, by size and by scale factor; no output coordinate whose taps differ
# between float32 and float64 arithmetic (the non-finite suite compares float32 runs with a float64 oracle)
INTERPOLATE: list[Case] = [
    (((2, 3, 5, 4),), {"scale_factor": 2}),
    (((1, 2, 5, 7),), {"size": (8, 3)}),
    (((1, 2, 6, 5),), {"scale_factor": (1.5, 0.5)}),
    (((2, 3, 5, 4),), {"scale_factor": 2, "mode": "bilinear"}),
    (((1, 2, 4, 6),), {"size": (7, 9), "mode": "bilinear", "align_corners": True}),
    (((1, 2, 5, 7),), {"size": (3, 10), "mode": "bilinear"}),
    (((1, 3, 4, 5),), {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True}),
    (((1, 1, 3, 3),), {"size": (3, 6), "mode": "bilinear"}),
    (((1, 2, 7, 5),), {"scale_factor": (0.6, 2.5), "mode": "bilinear"}),
    (((2, 3, 8, 6),), {"size": (4, 3), "mode": "bilinear"}),  # halving: each output between two inputs
    (((1, 2, 3, 4),), {"size": (9, 8)}),
    (((2, 3, 5, 4),), {"scale_factor": 2, "mode": "bicubic"}),  # taps clamped at both borders
    (((1, 2, 4, 6),), {"size": (7, 9), "mode": "bicubic", "align_corners": True}),
    (((2, 3, 8, 6),), {"size": (4, 3), "mode": "bicubic"}),
    (((1, 1, 3, 3),), {"size": (3, 6), "mode": "bicubic"}),  # rows of the same size: weights 0, 1, 0, 0
]

# query, key, value, attn_mask: batched heads, masks of both kinds (a (L, 1) bool mask masks whole rows:
# fully masked queries give zeros), causal with L = S and L > S, broadcast batch dimensions, a given scale
ATTENTION: list[Case] = [
    (((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), None), {}),
    (((2, 4, 5), (2, 6, 5), (2, 6, 3), Arg((4, 6), "bool")), {}),
    (((2, 4, 5), (2, 6, 5), (2, 6, 3), Arg((4, 1), "bool")), {}),
    (((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), None), {"is_causal": True}),
    (((2, 6, 4), (2, 3, 4), (2, 3, 5), None), {"is_causal": True}),
    (((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), (3, 4, 6)), {"scale": 0.3}),
    (((3, 5, 4), (1, 7, 4), (1, 7, 2), None), {}),
    (((5, 3), (4, 3), (4, 6), None), {"scale": -0.7}),
]

FORWARD: dict[str, list[Case]] = {
    "conv2d": CONV2D,
    "linear": LINEAR,
    "maxpool2d": MAXPOOL2D,
    "avgpool2d": AVGPOOL2D,
    "adaptiveavgpool2d": ADAPTIVE,
    "relu": ELEMENTWISE,
    "flatten": FLATTEN,
    "add": ADD,
    "concat": CONCAT,
    "reshape": RESHAPE,
    "batchnorm2d": BATCHNORM2D,
    "sigmoid": ELEMENTWISE,
    "tanh": ELEMENTWISE,
    "leaky_relu": LEAKY_RELU,
    "hardtanh": HARDTANH,
    "silu": ACTIVATION,
    "gelu": GELU,
    "hardswish": ACTIVATION,
    "hardsigmoid": ACTIVATION,
    "elu": ELU,
    "mish": ACTIVATION,
    "softmax": SOFTMAX,
    "log_softmax": SOFTMAX,
    "layer_norm": LAYER_NORM,
    "batch_norm_train": BATCH_NORM_TRAIN,
    "interpolate": INTERPOLATE,
    "scaled_dot_product_attention": ATTENTION,
    **OPS_FORWARD,
    **COMM,
}


def _out_shape(op: str, shapes: tuple[Any, ...], attrs: dict[str, Any]) -> tuple[int, ...]:
    return bind(op, shapes, "float64", attrs).out_shape


def _grad_cases(op: str, build: Any) -> list[Case]:
    cases = []
    for shapes, attrs in FORWARD[op]:
        cases.append(build(shapes, attrs, _out_shape(op, shapes, attrs)))
    return cases


GRADIENT_BUILDERS: dict[str, tuple[str, Any]] = {
    "conv2d_grad_input": ("conv2d", lambda s, a, y: ((y, s[1]), {**a, "input_size": s[0]})),
    "conv2d_grad_weight": ("conv2d", lambda s, a, y: ((y, s[0]), {**a, "weight_size": s[1]})),
    "conv2d_grad_bias": ("conv2d", lambda s, a, y: ((y,), {})),
    "linear_grad_input": ("linear", lambda s, a, y: ((y, s[1]), {})),
    "linear_grad_weight": ("linear", lambda s, a, y: ((y, s[0]), {})),
    "linear_grad_bias": ("linear", lambda s, a, y: ((y,), {})),
    "maxpool2d_grad": ("maxpool2d", lambda s, a, y: ((y, s[0]), a)),
    "avgpool2d_grad": ("avgpool2d", lambda s, a, y: ((y,), {**a, "input_size": s[0]})),
    "adaptiveavgpool2d_grad": ("adaptiveavgpool2d", lambda s, a, y: ((y,), {"input_size": s[0]})),
    "interpolate_grad": ("interpolate", lambda s, a, y: ((y,), _interpolate_grad_attrs(s[0], a))),
    **{f"scaled_dot_product_attention_grad_{name}": ("scaled_dot_product_attention", lambda s, a, y: ((y,) + s, a))
       for name in ("query", "key", "value")},
    "relu_grad": ("relu", lambda s, a, y: ((y, s[0]), {})),
    "sigmoid_grad": ("sigmoid", lambda s, a, y: ((y, y), {})),
    "tanh_grad": ("tanh", lambda s, a, y: ((y, y), {})),
    "leaky_relu_grad": ("leaky_relu", lambda s, a, y: ((y, s[0]), a)),
    **{f"{op}_grad": (op, lambda s, a, y: ((y, s[0]), a)) for op in ("hardtanh", "silu", "gelu", "hardswish", "hardsigmoid", "elu", "mish")},
    "softmax_grad": ("softmax", lambda s, a, y: ((y, y), a)),
    "log_softmax_grad": ("log_softmax", lambda s, a, y: ((y, y), a)),
    "layer_norm_grad_input": ("layer_norm", lambda s, a, y: ((y, s[0], s[1]), a)),
    "layer_norm_grad_weight": ("layer_norm", lambda s, a, y: ((y, s[0]), a)),
    "layer_norm_grad_bias": ("layer_norm", lambda s, a, y: ((y,), _only(a, ("normalized_ndim",)))),
    "batch_norm_train_grad_input": ("batch_norm_train", lambda s, a, y: ((y, s[0], s[1]), a)),
    "batch_norm_train_grad_weight": ("batch_norm_train", lambda s, a, y: ((y, s[0]), a)),
    "batch_norm_train_grad_bias": ("batch_norm_train", lambda s, a, y: ((y,), {})),
    **OPS_GRADIENT_BUILDERS,
    **COMM_GRADIENT_BUILDERS,
}


def _fused_cases() -> list[Case]:
    """conv2d_fused from the conv2d cases: with a residual, an activation (each in turn), both, or neither,
    varied over the cases. Outputs of fewer than 16 values get no activation: zeroing most of them would
    leave the relative error of one or two float32 sums (or 0/0), which measures their conditioning, not
    the implementation."""
    activations = tuple(FUSED_ACTIVATIONS)
    cases = []
    for index, (shapes, attrs) in enumerate(CONV2D):
        out = _out_shape("conv2d", shapes, attrs)
        residual = None if index % 3 == 0 else out
        activated = index % 3 != 1 and math.prod(out) >= 16
        activation = activations[2 * index % len(activations)] if activated else "none"
        cases.append((shapes + (residual,), {**attrs, "activation": activation}))
    return cases


def _batchnorm2d_fused_cases() -> list[Case]:
    """batchnorm2d_fused from the batchnorm2d cases, each with every activation in turn (and none)."""
    return [(shapes, {**attrs, "activation": activation}) for shapes, attrs in BATCHNORM2D
            for activation in ("none", *FUSED_ACTIVATIONS)]


def cases_for(op: str) -> list[Case]:
    """Every case of ``op`` (gradient ops derive theirs from their forward op's cases)."""
    if op in FORWARD:
        return FORWARD[op]
    if op == "conv2d_fused":
        return _fused_cases()
    if op == "batchnorm2d_fused":
        return _batchnorm2d_fused_cases()
    if op in GRADIENT_BUILDERS:
        forward, build = GRADIENT_BUILDERS[op]
        return _grad_cases(forward, build)
    return []


REFERENCE_ALGORITHM = {"linear": "gemm", "linear_grad_input": "gemm", "linear_grad_weight": "gemm"}
REFERENCE_ALGORITHM.update({op: "gemm" for op in GEMM_OPS})


def reference_name(op: str) -> str:
    """The reference implementation of ``op``: the NumPy backend's plainest algorithm."""
    return f"numpy:{REFERENCE_ALGORITHM.get(op, 'direct')}"


def _bfloat16_missing() -> str:
    """Why bfloat16 arrays cannot be made here ("" if they can: ml_dtypes registers the dtype with numpy)."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return "bfloat16 arrays need ml_dtypes (installed with algoswap-dnnl)"
    return ""


def checked_dtypes(impl: Any, dtypes: tuple[str, ...], integer_fallback: bool = False) -> list[str]:
    """The dtypes ``impl`` is checked in: those of ``dtypes`` it has (or int64 when it has none of them and
    ``integer_fallback``)."""
    return sorted(set(impl.dtypes) & set(dtypes)) or (sorted(set(impl.dtypes) & {"int64"}) if integer_fallback else [])


def skip_reason(impl: Any, dtype: str) -> str:
    """Why ``impl`` cannot be checked in ``dtype`` here ("" if it can): its backend is unavailable, or
    bfloat16 arrays cannot be made."""
    import algoswap

    available = algoswap.registry().backends[impl.backend].availability()
    skip = f"{impl.backend} unavailable: {available}" if available is not True else ""
    return skip or (_bfloat16_missing() if dtype == "bfloat16" else "")


def implementation_params(dtypes: tuple[str, ...], integer_fallback: bool = False) -> list[Any]:
    """One pytest param (impl, dtype) per registered implementation and each of its ``dtypes`` (or int64
    when it has none of them and ``integer_fallback``), skipped with the reason where its backend is
    unavailable or bfloat16 arrays cannot be made. Parametrized over the registry as installed."""
    import pytest

    import algoswap

    params = []
    for impl in algoswap.registry().implementations():
        for dtype in checked_dtypes(impl, dtypes, integer_fallback):
            skip = skip_reason(impl, dtype)
            marks = [pytest.mark.skip(reason=skip)] if skip else []
            params.append(pytest.param(impl, dtype, id=f"{impl.op}-{impl.qualified}-{dtype}", marks=marks))
    return params
