"""Cases of the operator set (arithmetic, matmul, reductions, slicing, indexing, instance and group norm,
dropout, losses, CSR products, optimizer updates) and of the comm family, merged into algoswap/testing/_cases.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import Arg, shape_of

Case = tuple[tuple[Any, ...], dict[str, Any]]

UNARY: list[Case] = [(((3, 4, 5),), {}), (((2, 3, 7, 6),), {}), (((11,),), {})]
BROADCAST: list[Case] = [
    (((2, 3, 4), (2, 3, 4)), {}),
    (((2, 3, 4, 5), (4, 1)), {}),
    (((3, 1), (4,)), {}),
    (((1,), (3, 2)), {}),
    (((1, 4, 1), (3, 1, 5)), {}),
    (((2, 6, 4, 5), (2, 6, 1, 1)), {}),  # a squeeze-and-excitation gate
    (((2, 6, 1, 1), (2, 6, 4, 5)), {}),
]

POSITIVE: list[Case] = [((Arg((3, 4, 5), "positive"),), {}), ((Arg((11,), "positive"),), {})]

DIV: list[Case] = [
    (((2, 3, 4), Arg((2, 3, 4), "positive")), {}),
    (((2, 3, 4, 5), Arg((3, 1, 1), "positive")), {}),
    (((4, 1), Arg((3,), "positive")), {}),
    (((1,), Arg((2, 3), "positive")), {}),
    (((2, 6, 4, 5), Arg((2, 6, 1, 1), "positive")), {}),
    (((2, 6, 1, 1), Arg((2, 6, 4, 5), "positive")), {}),
]

SCALAR: list[Case] = [(((3, 4),), {"value": 2.5}), (((2, 3, 4),), {"value": -1})]
RDIV_SCALAR: list[Case] = [((Arg((3, 4), "positive"),), {"value": 2.5}), ((Arg((5,), "positive"),), {"value": -1})]
POW_SCALAR: list[Case] = [((Arg((3, 4), "positive"),), {"exponent": 2.5}), ((Arg((5,), "positive"),), {"exponent": -0.5}), (((2, 3),), {"exponent": 3}),
                          (((4, 3),), {"exponent": 2}), ((Arg((2, 5), "positive"),), {"exponent": -1})]

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
    (((2, 6, 4, 5),), {"axes": (2, 3), "keepdims": True}),  # squeeze-and-excitation: over H, W
    (((3, 4, 7),), {"axes": -1}),
]
# maxima tied two by two, which the gradient shares between the tied elements (ties of three or more would put
# kinks into the finite differences of tests/test_gradients.py that its bound does not cover)
REDUCE_MAX: list[Case] = REDUCE + [((Arg((3, 4, 6), "pairs"),), {"axes": (1, 2)}), ((Arg((4, 6), "pairs"),), {"axes": -1})]

BROADCAST_TO: list[Case] = [(((3, 1),), {"shape": (2, 3, 4)}), (((4,),), {"shape": (3, 4)}), (((2, 3),), {"shape": (2, 3)})]
SUM_TO_SHAPE: list[Case] = [
    (((2, 3, 4),), {"shape": (3, 1)}), (((3, 4),), {"shape": (4,)}), (((2, 3),), {"shape": (1, 1)}), (((2, 3),), {"shape": ()}),
]

SLICE: list[Case] = [
    (((4, 5, 6),), {"begin": (1, 0, 2), "size": (2, -1, 3)}), (((5,),), {"begin": 1, "size": 3}),
    (((4, 7, 6),), {"begin": (0, 1, 0), "size": (4, -1, 2), "step": (1, 2, 3)}),  # x[:, 1::2, 0:4:3]
    (((9,),), {"begin": 2, "size": 3, "step": 3}), (((5, 3),), {"begin": (4, 0), "size": (-1, 2), "step": (2, 2)}),
]
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
    (((1, 2, 3, 4),), {"pads": ((0, 1), (1, 0)), "value": -np.inf}),  # timm's pad_same before a max pool
    (((3, 4),), {"pads": ((1, 1),), "value": np.nan}),
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
# (N, C, *spatial) of every rank from 2 to 5; groups of one channel (instance norm's) and of all (poolformer's GroupNorm1)
GROUP_NORM: list[Case] = [
    (((2, 6, 5, 4), (6,), (6,)), {"num_groups": 3}),
    (((3, 4, 3, 3), None, None), {"num_groups": 1}),
    (((2, 4, 7), (4,), None), {"num_groups": 2, "eps": 1e-3}),
    (((3, 12), (12,), (12,)), {"num_groups": 2}),  # (torch 2.13 fails the backward of a bias without a weight)
    (((2, 4, 2, 3, 2), (4,), (4,)), {"num_groups": 4}),
]

DROPOUT: list[Case] = [
    (((4, 5),), {"seed": 1}),
    (((2, 3, 4, 5),), {"p": 0.2, "seed": 7}),
    (((6,),), {"seed": 3, "training": False}),
    (((3, 3),), {"p": 0.0, "seed": 0}),
]

DROPOUT2D: list[Case] = [(((2, 3, 4, 5),), {"seed": 5}), (((3, 2, 2, 2),), {"p": 0.3, "seed": 2, "training": False})]

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

# Communication in a group of one rank (the reference's; tests/test_dist.py checks groups of 2 and 4 under torchrun)
_ONE = {"size": 1}
COMM: dict[str, list[Case]] = {
    "allreduce": [(((3, 4),), _ONE), (((2, 3, 5),), {"reduction": "mean", **_ONE}), (((5,),), {"reduction": "max", **_ONE}),
                  (((2, 2),), {"reduction": "min", **_ONE})],
    "allreduce_start": [(((3, 4),), _ONE), (((6,),), {"reduction": "mean", **_ONE})],
    "comm_wait": [(((3, 4),), {}), (((5,),), {})],
    "allgather": [(((3, 4),), _ONE), (((2, 3, 4),), {"axis": -1, **_ONE})],
    "reduce_scatter": [(((3, 4),), _ONE), (((2, 3, 4),), {"axis": 1, **_ONE})],
    "broadcast": [(((3, 4),), _ONE), (((5,),), {"root": 0, **_ONE})],
    "all_to_all": [(((4, 3),), _ONE), (((2, 6),), {"axis": 1, **_ONE})],
    "sendrecv": [(((3, 4),), {"send_to": 0, "recv_from": 0, **_ONE}), (((5,),), _ONE)],
    "shard_indices": [((Arg((6,), "int", 10),), {"rows": 10, "shards": 1}), ((Arg((2, 5), "int", 12),), {"rows": 4, "shards": 3})],
}


OPS_FORWARD: dict[str, list[Case]] = {
    "sub": BROADCAST,
    "mul": BROADCAST,
    "div": DIV,
    "neg": UNARY,
    "sqrt": POSITIVE,
    "rsqrt": POSITIVE,
    "add_scalar": SCALAR,
    "mul_scalar": SCALAR,
    "rdiv_scalar": RDIV_SCALAR,
    "pow_scalar": POW_SCALAR,
    "clamp_min": [(((3, 4),), {"value": 0.25}), (((2, 3, 4),), {"value": -1}), ((Arg((5,), "positive"),), {"value": 1e-12})],
    "zeros_like": UNARY,
    "ones_like": UNARY,
    "matmul": MATMUL,
    "batch_matmul": BATCH_MATMUL,
    "reduce_sum": REDUCE,
    "reduce_mean": REDUCE,
    "reduce_max": REDUCE_MAX,
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
    "group_norm": GROUP_NORM,
    "dropout": DROPOUT,
    "dropout2d": DROPOUT2D,
    "softmax_cross_entropy": SOFTMAX_CROSS_ENTROPY,
    "binary_cross_entropy": BINARY_CROSS_ENTROPY,
    "csrmv": CSRMV,
    "csrmm": CSRMM,
    **OPTIMIZERS,
}


def _some(attrs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k in names}


OPS_GRADIENT_BUILDERS: dict[str, tuple[str, Any]] = {
    "sum_to_shape": ("add", lambda s, a, y: ((y,), {"shape": s[1]})),
    "sub_grad_b": ("sub", lambda s, a, y: ((y,), {"shape": s[1]})),
    "mul_grad": ("mul", lambda s, a, y: ((y, s[1]), {"shape": s[0]})),
    "div_grad_a": ("div", lambda s, a, y: ((y, s[1]), {"shape": s[0]})),
    "div_grad_b": ("div", lambda s, a, y: ((y, s[0], s[1]), {"shape": shape_of(s[1])})),
    "sqrt_grad": ("sqrt", lambda s, a, y: ((y, Arg(y, "positive")), {})),
    "rsqrt_grad": ("rsqrt", lambda s, a, y: ((y, Arg(y, "positive")), {})),
    "rdiv_scalar_grad": ("rdiv_scalar", lambda s, a, y: ((y, s[0]), a)),
    "pow_scalar_grad": ("pow_scalar", lambda s, a, y: ((y, s[0]), a)),
    "clamp_min_grad": ("clamp_min", lambda s, a, y: ((y, s[0]), a)),
    "matmul_grad_a": ("matmul", lambda s, a, y: ((y, s[1]), a)),
    "matmul_grad_b": ("matmul", lambda s, a, y: ((y, s[0]), a)),
    "batch_matmul_grad_a": ("batch_matmul", lambda s, a, y: ((y, s[1]), {**a, "a_size": s[0]})),
    "batch_matmul_grad_b": ("batch_matmul", lambda s, a, y: ((y, s[0]), {**a, "b_size": s[1]})),
    "reduce_sum_grad": ("reduce_sum", lambda s, a, y: ((y,), {**a, "input_size": s[0]})),
    "reduce_mean_grad": ("reduce_mean", lambda s, a, y: ((y,), {**a, "input_size": s[0]})),
    "reduce_max_grad": ("reduce_max", lambda s, a, y: ((y, s[0]), a)),
    "slice_grad": ("slice", lambda s, a, y: ((y,), {"begin": a["begin"], "step": a.get("step"), "input_size": s[0]})),
    "pad_grad": ("pad", lambda s, a, y: ((y,), {**_some(a, ("pads", "mode")), "input_size": s[0]})),
    "where_grad": ("where", lambda s, a, y: ((y, s[0]), {"branch": "y"})),
    "embedding_grad": ("embedding", lambda s, a, y: ((y, s[1]), {"num_embeddings": s[0][0]})),
    "instance_norm_grad_input": ("instance_norm", lambda s, a, y: ((y, s[0], s[1]), a)),
    "instance_norm_grad_weight": ("instance_norm", lambda s, a, y: ((y, s[0]), a)),
    "instance_norm_grad_bias": ("instance_norm", lambda s, a, y: ((y,), {})),
    "group_norm_grad_input": ("group_norm", lambda s, a, y: ((y, s[0], s[1]), a)),
    "group_norm_grad_weight": ("group_norm", lambda s, a, y: ((y, s[0]), a)),
    "group_norm_grad_bias": ("group_norm", lambda s, a, y: ((y,), {})),
    "dropout_grad": ("dropout", lambda s, a, y: ((y,), a)),
    "dropout2d_grad": ("dropout2d", lambda s, a, y: ((y,), a)),
    "softmax_cross_entropy_grad": ("softmax_cross_entropy", lambda s, a, y: ((y, s[0], s[1]), a)),
    "binary_cross_entropy_grad": ("binary_cross_entropy", lambda s, a, y: ((y, s[0], s[1]), a)),
    "csrmm_grad_dense": ("csrmm", lambda s, a, y: ((s[0], y), a)),
}
COMM_GRADIENT_BUILDERS: dict[str, tuple[str, Any]] = {
    "allreduce_grad": ("allreduce", lambda s, a, y: ((y, s[0], y), a)),
    "broadcast_grad": ("broadcast", lambda s, a, y: ((y,), a)),
}

GEMM_OPS = tuple(f"{op}{grad}" for op in ("matmul", "batch_matmul") for grad in ("", "_grad_a", "_grad_b"))
