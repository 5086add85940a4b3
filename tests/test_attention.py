"""scaled_dot_product_attention's NumPy reference against torch (its math path, which torch documents as
the definition): every conformance case forward and backward (autograd's gradients for query, key and
value), the output of nothing to attend to, and the errors for calls torch refuses. The conformance,
gradient and non-finite suites hold every other implementation to the reference; test_nonfinite.py's
known cases check fully masked queries on each."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap.testing._cases import ATTENTION, draw
from helpers import assert_op_close

torch = pytest.importorskip("torch")

from torch_oracle import TORCH, to_torch  # noqa: E402

OP = "scaled_dot_product_attention"
_GRADIENTS = ("query", "key", "value")


@pytest.mark.parametrize("index", range(len(ATTENTION)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_reference_and_its_gradients_match_torch(index: int, dtype: str, rng: np.random.Generator) -> None:
    shapes, attrs = ATTENTION[index]
    arrays = [draw(rng, s, dtype) for s in shapes]
    tensors = [to_torch(a, differentiable=i < 3) for i, a in enumerate(arrays)]
    expected = TORCH[OP](*tensors, **attrs)
    got = algoswap.ops.call(OP, *arrays, algorithm="numpy:direct", **attrs)
    assert_op_close(OP, got, expected, arrays, attrs, context=f"case {index}")
    dy = rng.standard_normal(got.shape).astype(dtype)
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    for name, tensor in zip(_GRADIENTS, tensors):
        op = f"{OP}_grad_{name}"
        grad = algoswap.ops.call(op, dy, *arrays, algorithm="numpy:direct", **attrs)
        assert_op_close(op, grad, tensor.grad, [dy, *arrays], attrs, context=f"case {index}, gradient of {name}")


def test_the_default_scale_is_one_over_the_root_of_the_query_width() -> None:
    call = algoswap.registry().spec(OP).bind([(2, 3, 16), (2, 5, 16), (2, 5, 4)], ["float32"] * 3, {})
    assert call.attrs["scale"] == 0.25


def test_no_key_to_attend_to_gives_zeros_as_torch_does() -> None:
    q, k, v = np.ones((2, 3, 4), np.float32), np.ones((2, 0, 4), np.float32), np.ones((2, 0, 5), np.float32)
    out = algoswap.ops.scaled_dot_product_attention(q, k, v, None)
    expected = TORCH[OP](*(to_torch(a) for a in (q, k, v)))
    assert out.shape == (2, 3, 5) and np.array_equal(out, expected.numpy())
    with pytest.raises(algoswap.OpArgumentError, match="defines no value"):  # E = 0: every score is 0 * inf
        algoswap.ops.scaled_dot_product_attention(np.ones((2, 3, 0), np.float32), np.ones((2, 5, 0), np.float32),
                                                  np.ones((2, 5, 4), np.float32), None)


def _arrays(*shapes: tuple[int, ...], dtype: Any = np.float32) -> list[np.ndarray]:
    return [np.zeros(s, dtype) for s in shapes]


@pytest.mark.parametrize("arrays, attrs, words", [
    (_arrays((2, 3, 4), (2, 5, 3), (2, 5, 6)), {}, "argument 'key'.*the query's"),
    (_arrays((2, 3, 4), (2, 5, 4), (2, 6, 6)), {}, "argument 'value'.*the key's"),
    (_arrays((2, 3, 4), (3, 5, 4), (3, 5, 6)), {}, "argument 'key'.*broadcastable"),
    (_arrays((2, 3, 4), (2, 5, 4), (2, 5, 6), (3, 4)), {}, "argument 'attn_mask'.*broadcasts to the scores"),
    (_arrays((2, 3, 4), (2, 5, 4), (2, 5, 6), (3, 5)), {"is_causal": True}, "argument 'attn_mask'.*is_causal"),
    (_arrays((2, 3, 4), (2, 5, 4), (2, 5, 6)) + _arrays((3, 5), dtype=np.float64), {}, "argument 'attn_mask'.*float32"),
    (_arrays((2, 3, 4), (2, 5, 4), (2, 5, 6)) + _arrays((3, 5), dtype=np.int64), {}, "argument 'attn_mask'"),
    (_arrays((4,), (5, 4), (5, 6)), {}, "argument 'query'.*2-D"),
])
def test_calls_torch_refuses_are_errors_naming_the_argument(arrays: list[np.ndarray], attrs: dict[str, Any],
                                                            words: str) -> None:
    with pytest.raises((algoswap.OpArgumentError, algoswap.OpDtypeError), match=words):
        algoswap.ops.call(OP, *arrays, **attrs)
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        TORCH[OP](*(torch.from_numpy(a) for a in arrays), **attrs)  # in their own dtypes
