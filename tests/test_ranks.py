"""Arrays of many dimensions: every op that takes "any rank" takes up to 64 (numpy's limit), every
implementation serves such a call correctly or refuses it with a reason (oneDNN: 12 dimensions)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap._specs._geometry import MAX_RANK
from algoswap.testing._cases import Arg, bind, draw, reference_name
from helpers import assert_op_close

DNNL_MAX_DIMS = 12  # DNNL_MAX_NDIMS of oneDNN 3.2


def tall(rank: int, last: int = 3) -> tuple[int, ...]:
    """A small shape of ``rank`` dimensions (36 elements)."""
    return (2, 3) + (1,) * (rank - 3) + (last,)


def cases(rank: int) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """(op, input shapes, attributes) of ``rank`` dimensions for the ops that take arrays of any rank,
    and for broadcasting and transposing ops, whose rank oneDNN limits."""
    x, lead = tall(rank), tall(rank)[:-1]
    return [
        *[(op, (x,), {}) for op in ("relu", "sigmoid", "tanh", "leaky_relu")],
        ("relu_grad", (x, x), {}),
        ("softmax", (x,), {"axis": 1}),
        ("log_softmax", (x,), {"axis": -1}),
        ("softmax_grad", (x, x), {"axis": 1}),
        ("flatten", (x,), {"start_dim": 1, "end_dim": -2}),
        ("concat", (x, x), {"axis": 1}),
        ("linear", (x, (4, 3), (4,)), {}),
        ("linear_grad_input", (lead + (4,), (4, 3)), {}),
        ("linear_grad_weight", (lead + (4,), x), {}),
        ("layer_norm", (x, (1, 3), (1, 3)), {"normalized_ndim": 2}),
        ("batch_matmul", (lead + (2,), (1,) + lead[1:-1] + (2, 4)), {}),
        ("one_hot", (Arg(tall(rank - 1), "int", 4),), {"num_classes": 4}),
        ("embedding", ((5, 2), Arg(tall(rank - 1), "int", 5)), {}),
        ("add", (x, x[1:]), {}),
        ("mul", (x, x), {}),
        ("transpose", (x,), {}),
        ("reduce_sum", (x,), {"axes": 0}),
        ("reduce_mean", (x,), {"axes": -1, "keepdims": True}),
        ("reduce_max", (x,), {}),
        ("scaled_dot_product_attention", (x, x, x, None), {}),
    ]


def rank_params() -> list[Any]:
    registry = algoswap.registry()
    params = []
    for rank in (9, DNNL_MAX_DIMS, DNNL_MAX_DIMS + 1, MAX_RANK):
        for op, shapes, attrs in cases(rank):
            for impl in registry.implementations(op):
                if impl.backend in registry.backends and "float32" in impl.dtypes:
                    params.append(pytest.param(impl, shapes, attrs, id=f"{impl.qualified}-{op}-{rank}d"))
    return params


@pytest.mark.parametrize("impl, shapes, attrs", rank_params())
def test_many_dimensions_run_correctly_or_are_refused_with_a_reason(impl: algoswap.ImplRecord, shapes: tuple[Any, ...],
                                                                      attrs: dict[str, Any], rng: np.random.Generator) -> None:
    available = algoswap.registry().backends[impl.backend].availability()
    if available is not True:
        pytest.skip(f"{impl.backend}: {available}")
    call = bind(impl.op, shapes, "float32", attrs)
    answer = impl.check(call)
    rank = max(len(s) for s in (*call.shapes, call.out_shape) if s is not None)
    if answer is not True:
        assert impl.backend != "numpy", f"the reference refuses a {rank}-D call: {answer}"
        assert isinstance(answer, str) and answer, f"{impl.qualified} refuses without a reason"
        beyond = "at most 12 dimensions (DNNL_MAX_NDIMS)" in answer
        assert beyond == (impl.backend == "dnnl" and rank > DNNL_MAX_DIMS), f"{impl.qualified} on {rank}-D: {answer}"
        return
    inputs = [draw(rng, s, "float32") for s in shapes]
    host = algoswap.registry().backends[impl.backend].memory.is_host
    out = algoswap.ops.call(impl.op, *inputs, algorithm=impl.qualified, transfer=not host, **attrs)
    ref = algoswap.ops.call(impl.op, *[_wide(a) for a in inputs], algorithm=reference_name(impl.op), **attrs)
    assert out.shape == call.out_shape
    assert_op_close(impl.op, out, ref, [_wide(a) for a in inputs], attrs)


def _wide(a: Any) -> Any:
    return a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a


def test_ranks_past_the_limit_are_refused_naming_the_range() -> None:
    with pytest.raises(algoswap.OpArgumentError, match=r"relu: argument 'input' got a 65-D array .*expected a 1-D to 64-D array"):
        algoswap.registry().spec("relu").bind([(1,) * (MAX_RANK + 1)], ["float32"], {})
    with pytest.raises(algoswap.OpArgumentError, match=r"expected a 1-D to 63-D array"):  # its output has one more
        algoswap.registry().spec("one_hot").bind([(1,) * MAX_RANK], ["int64"], {"num_classes": 2})


def test_a_default_request_on_many_dimensions_falls_back_past_dnnl() -> None:
    """A 13-D broadcast add is beyond oneDNN: the default request is served by the next backend, and
    the rejection says why."""
    selection = algoswap.select("add", [tall(13), tall(13)[1:]])
    assert selection.backend.name != "dnnl"
    reasons = dict(selection.rejected)
    if "dnnl:direct" in reasons:
        assert "at most 12 dimensions (DNNL_MAX_NDIMS)" in reasons["dnnl:direct"]


def test_swapped_layers_take_tensors_of_many_dimensions(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from helpers import assert_close

    x = torch.from_numpy(rng.standard_normal(tall(10, last=6)).astype(np.float32))
    for op, module in (("linear", nn.Linear(6, 4)), ("relu", nn.ReLU()), ("flatten", nn.Flatten(2, -2))):
        expected = module(x)
        swapped = algoswap.swap_operation(op, module, "default")
        assert_close(swapped(x), expected, reduction_length=7, context=op)
