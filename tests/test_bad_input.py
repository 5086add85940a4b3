"""Bad input gets a clear error naming the op, the argument, what was given and what was expected."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap import ops


def _arrays(*shapes: tuple[int, ...] | None, dtype: str = "float32") -> list[np.ndarray | None]:
    rng = np.random.default_rng(0)
    return [None if s is None else rng.standard_normal(s).astype(dtype) for s in shapes]


CONV = ((1, 3, 8, 8), (4, 3, 3, 3), (4,))

BAD_CALLS = [
    # (op, shapes, attrs, argument named, words expected in the message)
    ("conv2d", ((3, 8, 8), (4, 3, 3, 3), None), {}, "input", "4-D"),
    ("conv2d", ((1, 3, 8, 8), (4, 3, 3), None), {}, "weight", "4-D"),
    ("conv2d", ((1, 3, 8, 8), (4, 2, 3, 3), None), {}, "weight", "input channels (3)"),
    ("conv2d", ((1, 4, 8, 8), (6, 2, 3, 3), None), {"groups": 4}, "weight", "groups=4"),
    ("conv2d", ((1, 4, 8, 8), (5, 2, 3, 3), None), {"groups": 2}, "groups", "divisor of the output channels"),
    ("conv2d", CONV[:2] + ((5,),), {}, "bias", "one per output channel"),
    ("conv2d", ((1, 3, 0, 8), (4, 3, 3, 3), None), {}, "input", "at least the dilated kernel (3)"),
    ("conv2d", ((1, 0, 8, 8), (4, 0, 3, 3), (4,)), {}, "input", "defines no value for its output (1, 4, 6, 6)"),
    ("conv2d", ((1, 3, 2, 2), (4, 3, 3, 3), None), {}, "input", "dilated kernel"),
    ("conv2d", CONV, {"stride": 0}, "stride", ">= 1"),
    ("conv2d", CONV, {"stride": -2}, "stride", ">= 1"),
    ("conv2d", CONV, {"stride": (1, 2, 3)}, "stride", "pair"),
    ("conv2d", CONV, {"padding": -1}, "padding", "'same'"),
    ("conv2d", CONV, {"padding": "full"}, "padding", "'valid'"),
    ("conv2d", CONV, {"padding": "same", "stride": 2}, "padding", "stride 1"),
    ("conv2d", CONV, {"padding": 8, "padding_mode": "reflect"}, "padding", "smaller than the input"),
    ("conv2d", CONV, {"padding_mode": "mirror"}, "padding_mode", "'reflect'"),
    ("conv2d", CONV, {"groups": 0}, "groups", ">= 1"),
    ("conv2d", CONV, {"dilation": 1.5}, "dilation", "int"),
    ("conv2d", CONV, {"strides": 2}, "strides", "no such attribute"),
    ("conv2d", CONV, {"stride": 2**63}, "stride", "each at most 2147483647 (2**31 - 1"),
    ("conv2d", CONV, {"dilation": (1, 2**31)}, "dilation", "each at most 2147483647"),
    ("conv2d", CONV, {"groups": 2**40}, "groups", "at most 2147483647"),
    ("maxpool2d", ((1, 2, 8, 8),), {"kernel_size": 2**32}, "kernel_size", "at most 2147483647"),
    ("flatten", ((2, 3, 4),), {"start_dim": -(2**40)}, "start_dim", "at most 2147483647"),
    ("one_hot", ((4,),), {"num_classes": 2**31}, "num_classes", "at most 2147483647"),
    ("linear", ((2, 5), (3, 4), None), {}, "weight", "last dimension"),
    ("linear", ((2, 4), (3, 4), (4,)), {}, "bias", "(3,)"),
    ("maxpool2d", ((1, 2, 8, 8),), {}, "kernel_size", "no default"),
    ("maxpool2d", ((1, 2, 8, 8),), {"kernel_size": 3, "padding": 2}, "padding", "half the kernel"),
    ("maxpool2d", ((1, 2, 8, 8),), {"kernel_size": 2, "ceil_mode": 1}, "ceil_mode", "True or False"),
    ("maxpool2d", ((1, 2, 2, 2),), {"kernel_size": 3}, "input", "kernel"),
    ("avgpool2d", ((1, 2, 8, 8),), {"kernel_size": 2, "divisor_override": 0}, "divisor_override", ">= 1"),
    ("adaptiveavgpool2d", ((1, 2, 8, 8),), {"output_size": (0, 2)}, "output_size", ">= 1"),
    ("flatten", ((2, 3, 4),), {"start_dim": 3}, "start_dim", "[-3, 2]"),
    ("flatten", ((2, 3, 4),), {"start_dim": 2, "end_dim": 1}, "end_dim", "not before start_dim"),
    ("conv2d_grad_input", ((1, 4, 7, 7), (4, 3, 3, 3)), {"input_size": (1, 3, 8, 8)}, "grad_output", "(1, 4, 6, 6)"),
    ("conv2d_grad_weight", ((1, 4, 6, 6), (1, 3, 8, 8)), {}, "weight_size", "no default"),
    ("relu_grad", ((2, 3), (2, 4)), {}, "grad_output", "(2, 4)"),
    ("add", ((2, 3, 4), (2, 5)), {}, "b", "'a' of shape (2, 3, 4)"),
    ("add", ((4, 3), (2, 3)), {}, "b", "broadcastable"),
    ("concat", ((2, 3), (2, 4)), {}, "inputs[1]", "(2, 3) of inputs[0] except on axis 0"),
    ("concat", ((2, 3), (2, 3), (2, 3, 1)), {"axis": 1}, "inputs[2]", "shape (2, 3, 1); expected the shape (2, 3) of inputs[0]"),
    ("concat", ((2, 3), (5, 3), (2, 4)), {}, "inputs[2]", "except on axis 0"),
    ("concat", ((2, 3), (2, 3)), {"axis": 2}, "axis", "[-2, 1]"),
    ("concat", ((2, 3),), {"axis": 1.0}, "axis", "an int"),
    ("reshape", ((2, 3, 4),), {"shape": (5, 5)}, "shape", "24 elements like the input (2, 3, 4) (it has 25)"),
    ("reshape", ((2, 3, 4),), {"shape": (5, -1)}, "shape", "divide the 24 elements"),
    ("reshape", ((2, 3, 4),), {"shape": (-1, -1)}, "shape", "at most one -1"),
    ("reshape", ((2, 3, 4),), {"shape": (0, 24)}, "shape", "24 elements like the input (2, 3, 4) (it has 0)"),
    ("reshape", ((0, 3, 4),), {"shape": (0, -1)}, "shape", "-1 could be any size"),
    ("reshape", ((2, 3, 4),), {"shape": (-2, 12)}, "shape", ">= 0 or -1"),
    ("reshape", ((2, 3, 4),), {}, "shape", "no default"),
    ("batchnorm2d", ((2, 3, 4, 4), (4,), (3,)), {}, "running_mean", "(3,), one per channel"),
    ("batchnorm2d", ((2, 3, 4, 4), (3,), (3,), (3,), (2,)), {}, "bias", "(3,)"),
    ("batchnorm2d", ((2, 3, 4), (3,), (3,)), {}, "input", "4-D"),
    ("batchnorm2d", ((2, 3, 4, 4), (3,), (3,)), {"eps": -1.0}, "eps", ">= 0"),
    ("batchnorm2d", ((2, 3, 4, 4), (3,)), {}, "inputs", "5 inputs"),
    ("leaky_relu", ((2, 3),), {"negative_slope": "0.1"}, "negative_slope", "a finite real number"),
    ("leaky_relu", ((2, 3),), {"negative_slope": float("nan")}, "negative_slope", "a finite real number"),
    ("sigmoid_grad", ((2, 3), (3, 2)), {}, "grad_output", "(3, 2) like 'output'"),
    ("leaky_relu_grad", ((2, 3), (2, 3)), {"negative_slope": True}, "negative_slope", "a finite real number"),
    ("softmax", ((2, 3),), {"axis": 2}, "axis", "[-2, 1] for a 2-D 'input'"),
    ("log_softmax", ((2, 3, 4),), {"axis": -4}, "axis", "[-3, 2]"),
    ("softmax", ((2, 3),), {"axis": 1.0}, "axis", "an int"),
    ("softmax_grad", ((2, 3), (2, 3)), {"axis": 5}, "axis", "[-2, 1]"),
    ("log_softmax_grad", ((2, 3), (2, 4)), {}, "grad_output", "(2, 4) like 'output'"),
    ("layer_norm", ((2, 3, 4), (3,), None), {}, "weight", "shape (4,), the last 1 dimension(s)"),
    ("layer_norm", ((2, 3, 4), (3, 4), (4,)), {"normalized_ndim": 2}, "bias", "shape (3, 4)"),
    ("layer_norm", ((2, 3, 4), None, None), {"normalized_ndim": 4}, "normalized_ndim", "[1, 3]"),
    ("layer_norm", ((2, 3, 4), None, None), {"normalized_ndim": 0}, "normalized_ndim", ">= 1"),
    ("layer_norm", ((2, 3, 4), None, None), {"eps": -1e-5}, "eps", ">= 0"),
    ("layer_norm_grad_input", ((2, 3, 5), (2, 3, 4), None), {}, "grad_output", "(2, 3, 4) like 'input'"),
    ("layer_norm_grad_bias", ((2, 3),), {"normalized_ndim": 3}, "normalized_ndim", "2-D 'grad_output'"),
    ("batch_norm_train", ((2, 3, 4),), {}, "input", "4-D"),
    ("batch_norm_train", ((2, 3, 4, 4), (4,), None), {}, "weight", "(3,), one per channel"),
    ("batch_norm_train", ((2, 3, 4, 4),), {"eps": -1.0}, "eps", "> 0"),
    ("batch_norm_train", ((2, 3, 4, 4),), {"eps": 0.0}, "eps", "> 0"),
    ("batch_norm_train_grad_input", ((2, 3, 4, 4), (2, 3, 4, 4)), {"eps": -0.5}, "eps", "> 0"),
    ("batch_norm_train_grad_weight", ((2, 3, 4, 4), (2, 3, 4, 5)), {}, "grad_output", "like 'input'"),
    ("sub", ((2, 3), (4, 3)), {}, "b", "broadcastable"),
    ("mul_grad", ((2, 3), (3,)), {"shape": (4,)}, "shape", "broadcastable with 'other' (3,)"),
    ("div_grad_b", ((2, 3), (2, 3), (3,)), {"shape": (2, 3)}, "shape", "the shape (3,) of 'b'"),
    ("sqrt_grad", ((2, 3), (3, 2)), {}, "grad_output", "(3, 2) like 'output'"),
    ("add_scalar", ((2, 3),), {}, "value", "no default"),
    ("mul_scalar", ((2, 3),), {"value": "2"}, "value", "a finite real number"),
    ("pow_scalar", ((2, 3),), {"exponent": float("inf")}, "exponent", "a finite real number"),
    ("matmul", ((3, 4), (5, 6)), {}, "b", "4 rows in op(b)"),
    ("matmul", ((3, 4, 2), (4, 5)), {}, "a", "2-D"),
    ("matmul", ((3, 4), (4, 5)), {"trans_a": 1}, "trans_a", "True or False"),
    ("batch_matmul", ((2, 3, 4), (3, 4, 5)), {}, "b", "batch dimensions broadcastable"),
    ("batch_matmul_grad_a", ((2, 3, 6), (2, 4, 5)), {"a_size": (2, 3, 4)}, "grad_output", "(2, 3, 5)"),
    ("reduce_sum", ((2, 3),), {"axes": 2}, "axes", "[-2, 1]"),
    ("reduce_sum", ((2, 3),), {"axes": (0, -2)}, "axes", "distinct"),
    ("reduce_mean", ((2, 3),), {"keepdims": "yes"}, "keepdims", "True or False"),
    ("reduce_sum_grad", ((3,),), {"axes": 1, "input_size": (2, 3)}, "grad_output", "(2,)"),
    ("broadcast_to", ((3, 2),), {"shape": (3, 4)}, "shape", "a shape the input (3, 2) broadcasts to"),
    ("sum_to_shape", ((3, 4),), {"shape": (2, 4)}, "shape", "broadcasts to the input (3, 4)"),
    ("slice", ((4, 5),), {"begin": (1, 2), "size": (4, 1)}, "size", "within the input (4, 5)"),
    ("slice", ((4, 5),), {"begin": (1,), "size": (2, 2)}, "begin", "2 entries"),
    ("split", ((4, 6),), {"sections": 4, "index": 0, "axis": 1}, "sections", "a divisor of the size 6"),
    ("split", ((4, 6),), {"sections": (2, 3), "index": 0}, "sections", "adding up to the size 4"),
    ("split", ((4, 6),), {"sections": 2, "index": 2}, "index", "[0, 1]"),
    ("pad", ((3, 4),), {"pads": ((1, 1), (1, 1), (1, 1))}, "pads", "at most 2 pairs"),
    ("pad", ((3, 4),), {"pads": ((4, 0),), "mode": "reflect"}, "pads", "smaller than the input"),
    ("pad", ((3, 4),), {"pads": ((1, -1),)}, "pads", "pairs of ints >= 0"),
    ("pad", ((3, 4),), {"pads": ((1, 1),), "mode": "circular"}, "mode", "'reflect'"),
    ("pad", ((3, 4),), {"pads": ((1, 1),), "value": "-inf"}, "value", "a real number (inf, -inf or nan too)"),
    ("transpose", ((2, 3, 4),), {"perm": (0, 1)}, "perm", "a permutation of 0..2"),
    ("where", ((3,), (3,), (3,)), {}, "condition", "expected bool"),
    ("embedding", ((5, 3), (4,)), {}, "indices", "an integer dtype"),
    ("one_hot", ((4,),), {"num_classes": 3}, "indices", "an integer dtype"),
    ("instance_norm", ((2, 3, 4, 4), (4,), None), {}, "weight", "(3,), one per channel"),
    ("group_norm", ((2, 6, 5), (6,), None), {"num_groups": 4}, "num_groups", "a divisor of the 6 channels"),
    ("group_norm", ((2, 6, 5), (6,), None), {}, "num_groups", "no default"),
    ("group_norm", ((6,), None, None), {"num_groups": 1}, "input", "2"),
    ("group_norm_grad_weight", ((2, 6, 5), (2, 6, 5)), {"num_groups": 4}, "num_groups", "a divisor"),
    ("dropout", ((3, 4),), {}, "seed", "no default"),
    ("dropout", ((3, 4),), {"p": 1.0, "seed": 0}, "p", "< 1"),
    ("dropout", ((3, 4),), {"seed": -1}, "seed", ">= 0"),
    ("softmax_cross_entropy", ((4, 5), (4, 4)), {}, "labels", "(4,) (class indices) or (4, 5)"),
    ("softmax_cross_entropy", ((4, 5), (4, 5)), {"reduction": "avg"}, "reduction", "'mean'"),
    ("binary_cross_entropy", ((4, 5), (4, 4)), {}, "target", "like 'input'"),
    ("binary_cross_entropy_grad", ((4,), (4, 5), (4, 5)), {}, "grad_output", "(), the shape of the loss"),
    ("csrmv", ((5, 4), (4,)), {}, "matrix", "a scipy.sparse CSR matrix"),
    ("sgd_update", ((3, 4), (3, 5)), {"lr": 0.1}, "grad", "like 'param'"),
    ("sgd_update", ((3, 4), (3, 4)), {}, "lr", "no default"),
    ("momentum_update", ((3, 4), (3, 4), (3, 4)), {"lr": -0.1}, "lr", ">= 0"),
    ("adam_update", ((3, 4),) * 4, {"lr": 0.1}, "step", "no default"),
    ("adam_update", ((3, 4),) * 4, {"lr": 0.1, "step": 1, "beta1": 1.0}, "beta1", "< 1"),
    ("sgd_update_sparse", ((6, 3), (4,), (4, 3)), {"lr": 0.1}, "indices", "an integer dtype"),
]


@pytest.mark.parametrize("op, shapes, attrs, argument, words", BAD_CALLS, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_bad_call_is_a_clear_error(op: str, shapes: tuple, attrs: dict, argument: str, words: str) -> None:
    with pytest.raises(algoswap.OpArgumentError) as caught:
        ops.call(op, *_arrays(*shapes), **attrs)
    error = caught.value
    assert (error.op, error.argument) == (op, argument)
    message = str(error)
    assert message.startswith(f"{op}: argument '{argument}' got ")
    assert words in message, message
    assert isinstance(error, ValueError)


def test_mixed_dtypes_are_refused_naming_both() -> None:
    x, w, b = _arrays(*CONV)
    with pytest.raises(algoswap.OpDtypeError, match=r"conv2d: argument 'weight' got 'float64'; expected float32, the dtype of 'input'"):
        ops.conv2d(x, w.astype(np.float64), b)


def test_integer_inputs_are_refused() -> None:
    with pytest.raises(algoswap.OpDtypeError, match="relu: argument 'input' got 'int64'; expected a floating dtype"):
        ops.relu(np.arange(6).reshape(2, 3))


def test_dtype_no_implementation_supports_lists_every_candidate() -> None:
    def register(registry: Any) -> None:  # the reference serves every float dtype: a backend of float32 only
        registry.add_backend("narrow", priority=-10)
        for algorithm in ("one", "two"):
            registry.add_implementation("conv2d", algorithm, "narrow", "algoswap_numpy.conv:conv2d_direct", dtypes=("float32",))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="narrow").status == "loaded"
    try:
        x, w, b = _arrays(*CONV, dtype="float16")
        with pytest.raises(algoswap.NoImplementationError) as caught:
            ops.call("conv2d", x, w, b, algorithm="narrow:default")
    finally:
        algoswap.reload_plugins()
    message = str(caught.value)
    for name in ("narrow:one", "narrow:two"):
        assert f"{name}: dtype float16 not supported (supports float32)" in message


def test_missing_and_extra_inputs() -> None:
    x, w = _arrays((1, 3, 8, 8), (4, 3, 3, 3))
    with pytest.raises(algoswap.OpArgumentError, match="conv2d: argument 'inputs' got 1 inputs; expected 3 inputs"):
        ops.conv2d(x)
    with pytest.raises(algoswap.OpArgumentError, match="relu: argument 'inputs' got 2 inputs"):
        ops.relu(x, x)
    with pytest.raises(algoswap.OpArgumentError, match="conv2d: argument 'weight' got None; expected an array"):
        ops.conv2d(x, None, None)


def test_unknown_op_suggests_a_close_name() -> None:
    with pytest.raises(AttributeError, match="registered ops: "):
        ops.conv3d
    with pytest.raises(algoswap.OpArgumentError, match="did you mean 'conv2d'"):
        ops.call("conv2", *_arrays(*CONV))


def test_errors_are_never_assertion_errors() -> None:
    for op, shapes, attrs, _, _ in BAD_CALLS:
        try:
            ops.call(op, *_arrays(*shapes), **attrs)
        except algoswap.AlgoswapError:
            continue
        pytest.fail(f"{op} {shapes} {attrs} was accepted")


def _csr(rows: int, cols: int) -> object:
    scipy_sparse = pytest.importorskip("scipy.sparse")
    return scipy_sparse.random(rows, cols, density=0.5, format="csr", dtype=np.float32, rng=0)


SPARSE_AND_INDEX_CALLS = [
    # (op, arrays builder, attrs, argument named, words expected)
    ("csrmv", lambda: (_csr(5, 4), np.ones(5, np.float32)), {}, "vector", "(4,) for the matrix (5, 4)"),
    ("csrmm", lambda: (_csr(5, 4), np.ones((5, 3), np.float32)), {}, "dense", "4 rows in op(dense)"),
    ("csrmm", lambda: (_csr(5, 4).tocoo(), np.ones((4, 3), np.float32)), {}, "matrix", "a scipy.sparse CSR matrix"),
    ("relu", lambda: (_csr(5, 4),), {}, "input", "a dense numpy array"),
    ("embedding", lambda: (np.ones((5, 3), np.float32), np.array([0, 5])), {}, "indices", "values in [0, 4]"),
    ("one_hot", lambda: (np.array([[0, -1]]),), {"num_classes": 3}, "indices", "values in [0, 2]"),
    ("softmax_cross_entropy", lambda: (np.ones((2, 3)), np.array([1, 3])), {}, "labels", "values in [0, 2]"),
    ("softmax_cross_entropy", lambda: (np.ones((2, 3)), np.ones((2, 3), np.float32)), {}, "labels", "float64, the dtype of 'logits'"),
    ("embedding_grad", lambda: (np.ones((3, 4)), np.array([0, 1])), {"num_embeddings": 5}, "grad_output", "the shape of 'indices'"),
    ("sgd_update_sparse", lambda: (np.ones((6, 3)), np.array([0, 1]), np.ones((2, 4))), {"lr": 0.1}, "rows", "one row of param"),
    ("adagrad_update_sparse", lambda: (np.ones((6, 3)), np.array([0, 6]), np.ones((2, 3)), np.ones((6, 3))), {"lr": 0.1}, "indices", "values in [0, 5]"),
    ("binary_cross_entropy", lambda: (np.array([0.5, 1.5]), np.ones(2)), {}, "input", "probabilities in [0, 1]"),
    ("binary_cross_entropy_grad", lambda: (np.ones(()), np.array([np.nan, 0.5]), np.ones(2)), {}, "input", "or NaN"),
    ("sgd_update", lambda: (np.ones((4, 3)).T, np.ones((3, 4))), {"lr": 0.1}, "param", "C-contiguous, writeable"),
    ("adam_update", lambda: (np.ones(3), np.ones(3), np.ones(3), np.ones(3)[::-1]), {"lr": 0.1, "step": 1}, "v", "updates it in place"),
]


@pytest.mark.parametrize("op, arrays, attrs, argument, words", SPARSE_AND_INDEX_CALLS,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(SPARSE_AND_INDEX_CALLS)])
def test_bad_sparse_index_or_in_place_call_is_a_clear_error(op: str, arrays: object, attrs: dict, argument: str, words: str) -> None:
    with pytest.raises(algoswap.OpArgumentError) as caught:
        ops.call(op, *arrays(), **attrs)  # type: ignore[operator]
    assert (caught.value.op, caught.value.argument) == (op, argument)
    assert words in str(caught.value), str(caught.value)


# ------------------------------------------------------------------ values that are not arrays


NOT_ARRAYS = [
    ("abc", "got a str 'abc'; expected a numpy array (or a number, or a nested list of numbers)"),
    (b"abc", "got a bytes b'abc'; expected a numpy array"),
    ({"a": 1}, "got a dict; expected a numpy array"),
    ({1.0, 2.0}, "got a set; expected a numpy array"),
    (1.5, "got a float 1.5 (as an array: 0-D); expected a 1-D to 64-D array"),
    ([[1.0, 2.0], [3.0]], "got a ragged nested list (rows of different lengths); expected a numpy array"),
    (np.array(["a", "b"]), "got '<U1'; expected a floating dtype"),
    (np.ones(3, ">f4"), "got a big-endian array (dtype '>f4'); expected an array in this machine's byte order"),
]


@pytest.mark.parametrize("value, words", NOT_ARRAYS, ids=[type(v).__name__ + str(i) for i, (v, _) in enumerate(NOT_ARRAYS)])
def test_inputs_that_are_not_arrays_are_named(value: object, words: str) -> None:
    with pytest.raises(algoswap.OpArgumentError) as caught:
        ops.relu(value)
    assert (caught.value.op, caught.value.argument) == ("relu", "input")
    assert str(caught.value).startswith("relu: argument 'input' ") and words in str(caught.value), str(caught.value)
    x, w, b = _arrays(*CONV)
    with pytest.raises(algoswap.OpArgumentError, match="conv2d: argument 'weight' got ") as caught:
        ops.conv2d(x, value, b)
    assert caught.value.argument == "weight"


@pytest.mark.parametrize("kind", ["constant", "parameter", "variable"])
def test_graph_arrays_that_are_not_arrays_are_named(kind: str) -> None:
    from algoswap import graph as g

    make = g.constant if kind == "constant" else (lambda value: getattr(g, kind)("v", value))
    for value, words in NOT_ARRAYS[:4] + NOT_ARRAYS[5:6]:
        with pytest.raises(algoswap.OpArgumentError) as caught:
            make(value)
        assert str(caught.value).startswith(f"graph.{kind}: argument 'value' got ") and words in str(caught.value), str(caught.value)


def test_graph_constants_keep_their_shape_and_their_values() -> None:
    from algoswap import graph as g

    source = np.arange(6.0).reshape(2, 3)
    node = g.constant(source)
    source[...] = -1.0  # the graph copied it: a later change does not reach the program
    assert g.constant(2.0).shape == () and np.array_equal(node.host, np.arange(6.0).reshape(2, 3))


def test_the_byte_order_is_refused_wherever_arrays_enter() -> None:
    from algoswap import graph as g

    other = ">f4" if np.little_endian else "<f4"
    with pytest.raises(algoswap.OpDtypeError, match=f"add: argument 'a' got a {'big' if np.little_endian else 'little'}-endian array"):
        algoswap.select("add", [(3,), (3,)], other)
    with pytest.raises(g.GraphError, match="argument 'input' got a big-endian array"):
        g.relu(g.parameter("w", np.ones((2, 3), ">f8")))


def test_a_tensor_is_refused_with_advice_where_it_cannot_be_an_array() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(algoswap.OpArgumentError, match="relu: argument 'input' got a torch.Tensor that requires grad; "
                       r"expected a numpy array or a tensor without autograd \(tensor.detach\(\)\)"):
        ops.relu(torch.ones(3, requires_grad=True))
    assert np.array_equal(ops.relu(torch.tensor([-1.0, 2.0])), [0.0, 2.0])  # a plain CPU tensor is an array-like


def test_a_warm_cache_refuses_what_a_cold_one_refuses() -> None:
    """stride=True, stride=1.0 and padding=False compare equal to 1 and 0: cache keys must tell them apart."""
    x, w, b = _arrays(*CONV)
    ops.conv2d(x, w, b, stride=1, padding=0)
    algoswap.select("conv2d", [x.shape, w.shape, b.shape], stride=1, padding=(0, 0))
    for attrs in ({"stride": True}, {"stride": 1.0}, {"padding": False}, {"stride": (1, True)}, {"padding": (0.0, 0)}):
        argument = next(iter(attrs))
        with pytest.raises(algoswap.OpArgumentError, match=f"conv2d: argument '{argument}' got "):
            ops.conv2d(x, w, b, **{"stride": 1, "padding": 0, **attrs})
        with pytest.raises(algoswap.OpArgumentError, match=f"conv2d: argument '{argument}' got "):
            algoswap.select("conv2d", [x.shape, w.shape, b.shape], **{"stride": 1, "padding": (0, 0), **attrs})
    with pytest.raises(algoswap.OpArgumentError, match="conv2d: argument 'input' got shape"):
        algoswap.select("conv2d", [(1.0, 3, 8, 8), w.shape, b.shape])  # a float size, after (1, 3, 8, 8) was cached


# ------------------------------------------------------------------ outputs too large for memory

TOO_LARGE = [
    # (op, shapes, attrs, argument named); every output needs more than 10 TB
    ("conv2d", ((1, 3, 8, 8), (64, 3, 3, 3), None), {"padding": 10**5}, "padding"),
    ("conv2d", ((1, 3, 8, 8), (64, 3, 3, 3), None), {"padding": 10**9}, "padding"),
    ("conv2d", ((1, 3, 8, 8), (64, 3, 3, 3), None), {"padding": (10**6, 10**6), "stride": 1}, "padding"),
    ("adaptiveavgpool2d", ((1, 64, 8, 8),), {"output_size": 10**6}, "output_size"),
    ("adaptiveavgpool2d", ((1, 64, 8, 8),), {"output_size": 10**9}, "output_size"),
    ("avgpool2d", ((1, 64, 8, 8),), {"kernel_size": 1, "padding": 0, "stride": 1, "divisor_override": 2}, None),
    ("pad", ((3, 4),), {"pads": ((10**6, 10**6), (10**6, 10**6))}, "pads"),
    ("broadcast_to", ((1,),), {"shape": (10**7, 10**7)}, "shape"),
    ("one_hot", (None,), {"num_classes": 10**9}, "num_classes"),
    ("add", ((10**7, 1), (1, 10**7)), {}, "inputs"),
]


@pytest.mark.parametrize("op, shapes, attrs, argument", [c for c in TOO_LARGE if c[3]], ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(TOO_LARGE) if c[3]])
def test_an_output_too_large_for_memory_is_refused_before_anything_runs(op: str, shapes: tuple, attrs: dict, argument: str) -> None:
    from algoswap._sizes import machine_bytes

    if (machine_bytes() or 0) > 10**13:
        pytest.skip("this machine has more than 10 TB of memory")
    arrays = _arrays(*shapes) if op != "one_hot" else [np.arange(10**4)]
    with pytest.raises(algoswap.OutputTooLargeError) as caught:
        ops.call(op, *arrays, **attrs)
    error = caught.value
    assert isinstance(error, MemoryError) and isinstance(error, algoswap.OpArgumentError)
    assert (error.op, error.argument) == (op, argument)
    assert f"{op}: argument '{argument}' got " in str(error)
    assert "expected a value for which the output fits in memory: the output (" in str(error)
    assert " TB, and this machine has " in str(error) or " GB, and this machine has " in str(error)


def test_sycl_refuses_ints_its_kernels_cannot_index_with() -> None:
    registry = algoswap.registry()
    if "sycl" not in registry.backends or registry.backends["sycl"].availability() is not True:
        pytest.skip("the SYCL backend is not available here")
    x, w, b = _arrays(*CONV)
    with pytest.raises(algoswap.NoImplementationError, match=r"sycl:direct: stride=\(268435456, 268435456\): integer attributes above"):
        ops.conv2d(x, w, b, stride=2**28, algorithm="sycl:direct")


# ------------------------------------------------------------------ the swap API

def test_the_swap_api_names_bad_inputs_and_sizes() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    conv = algoswap.swap_conv2d(nn.Sequential(nn.Conv2d(3, 64, 3, padding=10**5)))
    with pytest.raises(algoswap.OutputTooLargeError, match=r"conv2d: argument 'padding' got \(100000, 100000\); expected a "
                       r"value for which the output fits in memory: the output \(1, 64, 200006, 200006\) float32 would need 10.2 TB"):
        conv(torch.ones(1, 3, 8, 8))
    pool = algoswap.swap_operation("adaptiveavgpool2d", nn.Sequential(nn.AdaptiveAvgPool2d(10**7)))
    with pytest.raises(algoswap.OutputTooLargeError, match="adaptiveavgpool2d: argument 'output_size' got "):
        pool(torch.ones(1, 3, 8, 8))
    with pytest.raises(algoswap.SelectorError, match="layer '0' .*conv2d: argument 'stride' got .*each at most 2147483647"):
        algoswap.swap_conv2d(nn.Sequential(nn.Conv2d(3, 4, 3, stride=2**63)))
    model = algoswap.swap_backend(nn.Sequential(nn.Conv2d(3, 4, 3, padding=10**5), nn.Flatten()).eval())
    with pytest.raises(algoswap.OutputTooLargeError, match="conv2d: argument 'padding' got "):
        model(torch.ones(1, 3, 8, 8))
    for value, words in NOT_ARRAYS[:4] + NOT_ARRAYS[5:6]:
        with pytest.raises(algoswap.OpArgumentError) as caught:
            model(value)
        assert str(caught.value).startswith("algoswap.Model: argument 'input' got ") and words.split(";")[0] in str(caught.value)
