"""Cases spanning each op's attribute space, shared by the conformance suite and the benchmarks.

A case is (input shapes, attributes); the arrays are drawn fresh for every test run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import algoswap

Case = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Arg:
    """A case input that is not a standard normal array of the tested float dtype: kind 'positive'
    (uniform in [0.5, 2]), 'unit' (uniform in [0.05, 0.95]), 'int' (int64 in [0, high)), 'bool',
    or 'csr' (a scipy.sparse CSR matrix of the tested dtype, density 0.4)."""

    shape: tuple[int, ...]
    kind: str
    high: int = 0


def shape_of(entry: Any) -> tuple[int, ...] | None:
    return entry.shape if isinstance(entry, Arg) else entry


def dtype_of(entry: Any, dtype: str) -> str | None:
    if entry is None:
        return None
    kind = entry.kind if isinstance(entry, Arg) else "normal"
    return {"int": "int64", "bool": "bool"}.get(kind, dtype)


def bind(op: str, entries: tuple[Any, ...], dtype: str, attrs: dict[str, Any]) -> algoswap.OpCall:
    """The validated call of a case, its inputs drawn in ``dtype`` (integer and bool inputs aside)."""
    return algoswap.registry().spec(op).bind([shape_of(e) for e in entries], [dtype_of(e, dtype) for e in entries], attrs)


def draw(rng: np.random.Generator, entry: Any, dtype: str) -> Any:
    """A fresh random input for a case entry (None stays None)."""
    if entry is None:
        return None
    if not isinstance(entry, Arg):
        return np.asarray(rng.standard_normal(entry)).astype(dtype)
    if entry.kind == "positive":
        return rng.uniform(0.5, 2.0, entry.shape).astype(dtype)
    if entry.kind == "unit":
        return rng.uniform(0.05, 0.95, entry.shape).astype(dtype)
    if entry.kind == "int":
        return rng.integers(0, entry.high, entry.shape)
    if entry.kind == "bool":
        return rng.random(entry.shape) < 0.5
    import scipy.sparse

    return scipy.sparse.random(*entry.shape, density=0.4, format="csr", dtype=dtype, rng=rng, data_rvs=rng.standard_normal)

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

SOFTMAX: list[Case] = [
    (((3, 7),), {}),
    (((2, 5, 3),), {"axis": 1}),
    (((2, 3, 4, 5),), {"axis": 0}),
    (((4, 3, 5),), {"axis": -2}),
    (((9,),), {"axis": -1}),
]

LAYER_NORM: list[Case] = [
    (((4, 7), (7,), (7,)), {}),
    (((2, 3, 5), None, None), {}),
    (((2, 3, 5), (5,), None), {"eps": 1e-3}),
    (((3, 4, 5), (4, 5), (4, 5)), {"normalized_ndim": 2}),
    (((2, 3, 4, 3), None, None), {"normalized_ndim": 2, "eps": 0.0}),
    (((3, 5), None, (3, 5)), {"normalized_ndim": 2}),
]

BATCH_NORM_TRAIN: list[Case] = [
    (((2, 3, 5, 4), (3,), (3,)), {}),
    (((3, 4, 3, 3), None, None), {}),
    (((2, 2, 4, 3), (2,), None), {"eps": 1e-3}),
    (((5, 3, 1, 1), None, (3,)), {"eps": 0.1}),
]

POSITIVE: list[Case] = [((Arg((3, 4, 5), "positive"),), {}), ((Arg((11,), "positive"),), {})]

DIV: list[Case] = [
    (((2, 3, 4), Arg((2, 3, 4), "positive")), {}),
    (((2, 3, 4, 5), Arg((3, 1, 1), "positive")), {}),
    (((4, 1), Arg((3,), "positive")), {}),
    (((1,), Arg((2, 3), "positive")), {}),
]

SCALAR: list[Case] = [(((3, 4),), {"value": 2.5}), (((2, 3, 4),), {"value": -1})]
RDIV_SCALAR: list[Case] = [((Arg((3, 4), "positive"),), {"value": 2.5}), ((Arg((5,), "positive"),), {"value": -1})]
POW_SCALAR: list[Case] = [((Arg((3, 4), "positive"),), {"exponent": 2.5}), ((Arg((5,), "positive"),), {"exponent": -0.5}), (((2, 3),), {"exponent": 3})]

MATMUL: list[Case] = [
    (((3, 4), (4, 5)), {}),
    (((4, 3), (4, 5)), {"trans_a": True}),
    (((3, 4), (5, 4)), {"trans_b": True}),
    (((4, 3), (5, 4)), {"trans_a": True, "trans_b": True}),
]

BATCH_MATMUL: list[Case] = [
    (((2, 3, 4), (2, 4, 5)), {}),
    (((2, 1, 4, 3), (5, 4, 2)), {"trans_a": True}),
    (((3, 4, 5), (1, 6, 5)), {"trans_b": True}),
    (((2, 3, 4, 3), (2, 3, 2, 4)), {"trans_a": True, "trans_b": True}),
]

REDUCE: list[Case] = [
    (((2, 3, 4),), {}),
    (((2, 3, 4),), {"axes": 1}),
    (((2, 3, 4, 5),), {"axes": (0, -1), "keepdims": True}),
    (((3, 5),), {"axes": (1, 0)}),
]

BROADCAST_TO: list[Case] = [(((3, 1),), {"shape": (2, 3, 4)}), (((4,),), {"shape": (3, 4)}), (((2, 3),), {"shape": (2, 3)})]
SUM_TO_SHAPE: list[Case] = [
    (((2, 3, 4),), {"shape": (3, 1)}), (((3, 4),), {"shape": (4,)}), (((2, 3),), {"shape": (1, 1)}), (((2, 3),), {"shape": ()}),
]

SLICE: list[Case] = [(((4, 5, 6),), {"begin": (1, 0, 2), "size": (2, -1, 3)}), (((5,),), {"begin": 1, "size": 3})]
SPLIT: list[Case] = [
    (((4, 6),), {"sections": 3, "index": 1, "axis": 1}),
    (((5, 2, 3),), {"sections": (2, 3), "index": 1}),
    (((2, 3, 4),), {"sections": (1, 2, 1), "index": 0, "axis": -1}),
]
PAD: list[Case] = [
    (((2, 3, 4, 5),), {"pads": ((1, 1), (2, 0))}),
    (((2, 3, 4, 5),), {"pads": ((1, 2), (2, 1)), "mode": "reflect"}),
    (((3, 4),), {"pads": ((2, 1), (0, 3)), "mode": "replicate"}),
    (((3, 4),), {"pads": ((1, 0), (0, 2)), "value": 1.5}),
]
TRANSPOSE: list[Case] = [(((2, 3, 4),), {}), (((2, 3, 4, 5),), {"perm": (0, 2, 3, 1)}), (((3, 4),), {"perm": (1, 0)})]

ONE_HOT: list[Case] = [((Arg((5,), "int", 4),), {"num_classes": 4}), ((Arg((2, 3), "int", 3),), {"num_classes": 5, "dtype": "float64"})]
WHERE: list[Case] = [((Arg((3, 4), "bool"), (3, 4), (3, 4)), {}), ((Arg((2, 3, 5), "bool"), (2, 3, 5), (2, 3, 5)), {})]
EMBEDDING: list[Case] = [(((10, 4), Arg((6,), "int", 10)), {}), (((7, 3), Arg((2, 5), "int", 7)), {})]

INSTANCE_NORM: list[Case] = [
    (((2, 3, 5, 4), (3,), (3,)), {}),
    (((3, 4, 3, 3), None, None), {}),
    (((2, 2, 4, 3), (2,), None), {"eps": 1e-3}),
]

DROPOUT: list[Case] = [
    (((4, 5),), {"seed": 1}),
    (((2, 3, 4, 5),), {"p": 0.2, "seed": 7}),
    (((6,),), {"seed": 3, "training": False}),
    (((3, 3),), {"p": 0.0, "seed": 0}),
]

SOFTMAX_CROSS_ENTROPY: list[Case] = [
    (((4, 5), Arg((4,), "int", 5)), {}),
    (((3, 4), Arg((3, 4), "unit")), {"reduction": "sum"}),
    (((6, 3), Arg((6,), "int", 3)), {"reduction": "none"}),
]
BINARY_CROSS_ENTROPY: list[Case] = [
    ((Arg((4, 5), "unit"), Arg((4, 5), "unit")), {}),
    ((Arg((6,), "unit"), Arg((6,), "unit")), {"reduction": "none"}),
    ((Arg((2, 3, 2), "unit"), Arg((2, 3, 2), "unit")), {"reduction": "sum"}),
]

CSRMV: list[Case] = [((Arg((5, 4), "csr"), (4,)), {}), ((Arg((5, 4), "csr"), (5,)), {"trans": True})]
CSRMM: list[Case] = [
    ((Arg((5, 4), "csr"), (4, 3)), {}),
    ((Arg((5, 4), "csr"), (5, 3)), {"trans_a": True}),
    ((Arg((5, 4), "csr"), (3, 4)), {"trans_b": True}),
    ((Arg((5, 4), "csr"), (3, 5)), {"trans_a": True, "trans_b": True}),
]

_P = (6, 3)
_SPARSE_GRAD = (_P, Arg((5,), "int", 6), (5, 3))
OPTIMIZER_STATE = {"sgd": (), "momentum": (_P,), "nesterov": (_P,), "adagrad": (Arg(_P, "positive"),), "adam": (_P, Arg(_P, "positive"))}
OPTIMIZER_ATTRS: dict[str, list[dict[str, Any]]] = {
    "sgd": [{"lr": 0.1}],
    "momentum": [{"lr": 0.1}, {"lr": 0.05, "momentum": 0.5}],
    "nesterov": [{"lr": 0.1}, {"lr": 0.05, "momentum": 0.5}],
    "adagrad": [{"lr": 0.1}, {"lr": 0.5, "eps": 1e-6}],
    "adam": [{"lr": 0.01, "step": 1}, {"lr": 0.1, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "step": 5}],
}
OPTIMIZERS: dict[str, list[Case]] = {}
for _name, _state in OPTIMIZER_STATE.items():
    OPTIMIZERS[f"{_name}_update"] = [((_P, _P) + _state, a) for a in OPTIMIZER_ATTRS[_name]]
    OPTIMIZERS[f"{_name}_update_sparse"] = [(_SPARSE_GRAD + _state, a) for a in OPTIMIZER_ATTRS[_name]]


def _only(attrs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k in names}


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
    "softmax": SOFTMAX,
    "log_softmax": SOFTMAX,
    "layer_norm": LAYER_NORM,
    "batch_norm_train": BATCH_NORM_TRAIN,
    "sub": ADD,
    "mul": ADD,
    "div": DIV,
    "neg": ELEMENTWISE,
    "sqrt": POSITIVE,
    "rsqrt": POSITIVE,
    "add_scalar": SCALAR,
    "mul_scalar": SCALAR,
    "rdiv_scalar": RDIV_SCALAR,
    "pow_scalar": POW_SCALAR,
    "zeros_like": ELEMENTWISE,
    "ones_like": ELEMENTWISE,
    "matmul": MATMUL,
    "batch_matmul": BATCH_MATMUL,
    "reduce_sum": REDUCE,
    "reduce_mean": REDUCE,
    "broadcast_to": BROADCAST_TO,
    "sum_to_shape": SUM_TO_SHAPE,
    "slice": SLICE,
    "split": SPLIT,
    "pad": PAD,
    "transpose": TRANSPOSE,
    "one_hot": ONE_HOT,
    "where": WHERE,
    "embedding": EMBEDDING,
    "instance_norm": INSTANCE_NORM,
    "dropout": DROPOUT,
    "softmax_cross_entropy": SOFTMAX_CROSS_ENTROPY,
    "binary_cross_entropy": BINARY_CROSS_ENTROPY,
    "csrmv": CSRMV,
    "csrmm": CSRMM,
    **OPTIMIZERS,
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
    "relu_grad": ("relu", lambda s, a, y: ((y, s[0]), {})),
    "sigmoid_grad": ("sigmoid", lambda s, a, y: ((y, y), {})),
    "tanh_grad": ("tanh", lambda s, a, y: ((y, y), {})),
    "leaky_relu_grad": ("leaky_relu", lambda s, a, y: ((y, s[0]), a)),
    "softmax_grad": ("softmax", lambda s, a, y: ((y, y), a)),
    "log_softmax_grad": ("log_softmax", lambda s, a, y: ((y, y), a)),
    "layer_norm_grad_input": ("layer_norm", lambda s, a, y: ((y, s[0], s[1]), a)),
    "layer_norm_grad_weight": ("layer_norm", lambda s, a, y: ((y, s[0]), a)),
    "layer_norm_grad_bias": ("layer_norm", lambda s, a, y: ((y,), _only(a, ("normalized_ndim",)))),
    "batch_norm_train_grad_input": ("batch_norm_train", lambda s, a, y: ((y, s[0], s[1]), a)),
    "batch_norm_train_grad_weight": ("batch_norm_train", lambda s, a, y: ((y, s[0]), a)),
    "batch_norm_train_grad_bias": ("batch_norm_train", lambda s, a, y: ((y,), {})),
    "sum_to_shape": ("add", lambda s, a, y: ((y,), {"shape": s[1]})),
    "sub_grad_b": ("sub", lambda s, a, y: ((y,), {"shape": s[1]})),
    "mul_grad": ("mul", lambda s, a, y: ((y, s[1]), {"shape": s[0]})),
    "div_grad_a": ("div", lambda s, a, y: ((y, s[1]), {"shape": s[0]})),
    "div_grad_b": ("div", lambda s, a, y: ((y, s[0], s[1]), {"shape": shape_of(s[1])})),
    "sqrt_grad": ("sqrt", lambda s, a, y: ((y, Arg(y, "positive")), {})),
    "rsqrt_grad": ("rsqrt", lambda s, a, y: ((y, Arg(y, "positive")), {})),
    "rdiv_scalar_grad": ("rdiv_scalar", lambda s, a, y: ((y, s[0]), a)),
    "pow_scalar_grad": ("pow_scalar", lambda s, a, y: ((y, s[0]), a)),
    "matmul_grad_a": ("matmul", lambda s, a, y: ((y, s[1]), a)),
    "matmul_grad_b": ("matmul", lambda s, a, y: ((y, s[0]), a)),
    "batch_matmul_grad_a": ("batch_matmul", lambda s, a, y: ((y, s[1]), {**a, "a_size": s[0]})),
    "batch_matmul_grad_b": ("batch_matmul", lambda s, a, y: ((y, s[0]), {**a, "b_size": s[1]})),
    "reduce_sum_grad": ("reduce_sum", lambda s, a, y: ((y,), {**a, "input_size": s[0]})),
    "reduce_mean_grad": ("reduce_mean", lambda s, a, y: ((y,), {**a, "input_size": s[0]})),
    "slice_grad": ("slice", lambda s, a, y: ((y,), {"begin": a["begin"], "input_size": s[0]})),
    "pad_grad": ("pad", lambda s, a, y: ((y,), {**_only(a, ("pads", "mode")), "input_size": s[0]})),
    "where_grad": ("where", lambda s, a, y: ((y, s[0]), {"branch": "y"})),
    "embedding_grad": ("embedding", lambda s, a, y: ((y, s[1]), {"num_embeddings": s[0][0]})),
    "instance_norm_grad_input": ("instance_norm", lambda s, a, y: ((y, s[0], s[1]), a)),
    "instance_norm_grad_weight": ("instance_norm", lambda s, a, y: ((y, s[0]), a)),
    "instance_norm_grad_bias": ("instance_norm", lambda s, a, y: ((y,), {})),
    "dropout_grad": ("dropout", lambda s, a, y: ((y,), a)),
    "softmax_cross_entropy_grad": ("softmax_cross_entropy", lambda s, a, y: ((y, s[0], s[1]), a)),
    "binary_cross_entropy_grad": ("binary_cross_entropy", lambda s, a, y: ((y, s[0], s[1]), a)),
    "csrmm_grad_dense": ("csrmm", lambda s, a, y: ((s[0], y), a)),
}


def cases_for(op: str) -> list[Case]:
    """Every case of ``op`` (gradient ops derive theirs from their forward op's cases)."""
    if op in FORWARD:
        return FORWARD[op]
    if op in GRADIENT_BUILDERS:
        forward, build = GRADIENT_BUILDERS[op]
        return _grad_cases(forward, build)
    return []


REFERENCE_ALGORITHM = {"linear": "gemm", "linear_grad_input": "gemm", "linear_grad_weight": "gemm"}
REFERENCE_ALGORITHM.update({f"{op}{grad}": "gemm" for op in ("matmul", "batch_matmul") for grad in ("", "_grad_a", "_grad_b")})


def reference_name(op: str) -> str:
    """The reference implementation of ``op``: the NumPy backend's plainest algorithm."""
    return f"numpy:{REFERENCE_ALGORITHM.get(op, 'direct')}"
