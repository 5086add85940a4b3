"""A batch of 0 (any size 0) is accepted where torch accepts it: the output is empty, of the spec's
shape and dtype in the backend's memory space, and no kernel runs. An empty input giving a non-empty
output gets the op's declared value (a sum over nothing is 0, a mean NaN), or a clear error.

The "tripwire" backend implements every op with a kernel that fails the test if it ever runs."""

from __future__ import annotations

import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from boxed_backend import Box, register_boxed
from algoswap.testing._cases import Arg, bind, cases_for, draw, shape_of

ALL_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
RAN: list[str] = []


def _tripwire(op: str) -> Any:
    def kernel(*arrays: Any, **attrs: Any) -> Any:
        RAN.append(op)
        raise AssertionError(f"a {op} kernel ran on {[getattr(a, 'shape', a) for a in arrays]}")

    return kernel


@pytest.fixture(scope="module", autouse=True)
def tripwire() -> Iterator[None]:
    def register(registry: Any) -> None:
        registry.add_backend("tripwire", priority=-100)
        for op in algoswap.registry().ops:
            registry.add_implementation(op, "direct", "tripwire", _tripwire(op), dtypes=ALL_DTYPES)

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="tripwire").status == "loaded"
    yield
    algoswap.reload_plugins()


@pytest.fixture(autouse=True)
def no_kernel_ran() -> Iterator[None]:
    RAN.clear()
    yield
    assert not RAN, f"kernels ran on empty inputs: {RAN}"


def _batch_zero(shapes: tuple[Any, ...], attrs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The case with its leading (batch) size 0: in every input and shape attribute that has it."""
    first = shape_of(shapes[0]) if shapes[0] is not None else None
    lead = first[0] if first else None

    def zeroed(shape: Any) -> Any:
        return (0,) + tuple(shape[1:]) if shape and shape[0] == lead else shape

    entries = tuple(None if e is None else Arg(zeroed(e.shape), e.kind, e.high) if isinstance(e, Arg) else zeroed(e) for e in shapes)
    sized = {k: zeroed(v) if isinstance(v, tuple) and first is not None and len(v) == len(first) and all(isinstance(i, int) for i in v) else v
             for k, v in attrs.items()}
    return entries, sized


def _cases() -> list[Any]:
    params = []
    for op in sorted(algoswap.registry().ops):
        for index, (shapes, attrs) in enumerate(cases_for(op)):
            if shapes and shapes[0] is not None and shape_of(shapes[0]):
                params.append(pytest.param(op, *_batch_zero(shapes, attrs), id=f"{op}-{index}"))
    return params


# Ops whose batch-0 cases must give an empty output (what torch gives), not an error.
MUST_BE_EMPTY = {
    "conv2d", "conv2d_fused", "conv2d_grad_input", "linear", "linear_grad_input", "maxpool2d", "avgpool2d",
    "adaptiveavgpool2d", "relu", "flatten", "add", "batchnorm2d", "batchnorm2d_fused", "softmax", "log_softmax", "layer_norm",
    "sigmoid", "tanh", "leaky_relu", "reshape", "matmul", "transpose", "dropout",
}
MUST_FILL = {"conv2d_grad_weight", "conv2d_grad_bias", "linear_grad_weight", "linear_grad_bias", "reduce_sum"}


def _outcome(op: str, shapes: tuple[Any, ...], attrs: dict[str, Any], rng: np.random.Generator) -> str:
    """Run the case on the tripwire backend: "refused" (a clear error), "empty" or "filled" (checked)."""
    try:
        call = bind(op, shapes, "float64", attrs)
    except algoswap.OpArgumentError:
        return "refused"
    inputs = [draw(rng, s, "float64") for s in shapes]
    out = algoswap.ops.call(op, *inputs, algorithm="tripwire:direct", **attrs)
    if algoswap.registry().spec(op).in_place:
        assert out is inputs[0]
        return "empty"
    assert isinstance(out, np.ndarray) and out.shape == call.out_shape and out.dtype == np.dtype(call.out_dtype)
    if call.fill is None:
        assert out.size == 0, (op, out.shape)
        return "empty"
    assert np.array_equal(out, np.full(out.shape, call.fill), equal_nan=True), (op, out)
    return "filled"


@pytest.mark.parametrize("op, shapes, attrs", _cases())
def test_a_batch_of_zero_runs_no_kernel(op: str, shapes: tuple[Any, ...], attrs: dict[str, Any], rng: np.random.Generator) -> None:
    _outcome(op, shapes, attrs, rng)


def test_the_ops_torch_runs_on_a_batch_of_zero_give_empty_outputs(rng: np.random.Generator) -> None:
    found: dict[str, set[str]] = {"empty": set(), "filled": set(), "refused": set()}
    for param in _cases():
        op, shapes, attrs = param.values
        found[_outcome(op, shapes, attrs, rng)].add(op)
    assert MUST_BE_EMPTY <= found["empty"], sorted(MUST_BE_EMPTY - found["empty"])
    assert MUST_FILL <= found["filled"], sorted(MUST_FILL - found["filled"])


EMPTY_TO_VALUES = [
    # (op, shapes, attrs, the value of every output element)
    ("reduce_sum", ((0, 3),), {"axes": 0}, 0.0),
    ("reduce_mean", ((0, 3),), {"axes": 0}, np.nan),
    ("reduce_mean", ((2, 0),), {}, np.nan),
    ("matmul", ((4, 0), (0, 5)), {}, 0.0),
    ("batch_matmul", ((2, 3, 0), (2, 0, 4)), {}, 0.0),
    ("linear", ((5, 0), (4, 0), None), {}, 0.0),
    ("sum_to_shape", ((0, 3),), {"shape": (1, 3)}, 0.0),
    ("pad", ((0, 3),), {"pads": ((1, 1), (0, 0)), "value": 2.5}, 2.5),
    ("binary_cross_entropy", ((0,), (0,)), {}, np.nan),
    ("binary_cross_entropy", ((0,), (0,)), {"reduction": "sum"}, 0.0),
]


@pytest.mark.parametrize("op, shapes, attrs, value", EMPTY_TO_VALUES, ids=[f"{c[0]}-{i}" for i, c in enumerate(EMPTY_TO_VALUES)])
def test_an_empty_input_gives_torchs_value_where_the_output_is_not_empty(op: str, shapes: tuple, attrs: dict, value: float) -> None:
    inputs = [None if s is None else np.zeros(s, np.float32) for s in shapes]
    out = algoswap.ops.call(op, *inputs, algorithm="tripwire:direct", **attrs)
    expected = algoswap.registry().spec(op).bind(shapes, ["float32" if s is not None else None for s in shapes], attrs).out_shape
    assert out.shape == expected and out.dtype == np.float32 and out.size > 0
    assert np.array_equal(out, np.full(expected, value, np.float32), equal_nan=True)


EMPTY_REFUSED = [
    # (op, shapes, attrs, the empty argument named): torch's answer would need a kernel on empty arrays, or torch refuses
    ("linear", ((5, 0), (4, 0), (4,)), {}, "input"),
    ("concat", ((0, 3), (2, 3)), {}, "inputs"),
    ("adaptiveavgpool2d", ((1, 3, 0, 4),), {"output_size": 2}, "input"),
    ("pad", ((0, 3),), {"pads": ((1, 1), (0, 0)), "mode": "replicate"}, "input"),
]


@pytest.mark.parametrize("op, shapes, attrs, argument", EMPTY_REFUSED, ids=[c[0] for c in EMPTY_REFUSED])
def test_an_empty_input_with_no_defined_output_is_a_clear_error(op: str, shapes: tuple, attrs: dict, argument: str) -> None:
    inputs = [None if s is None else np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(algoswap.OpArgumentError, match=f"{op}: argument '{argument}' got shape .* \\(no elements\\); "
                       f"expected an input with elements: {op} defines no value for its output"):
        algoswap.ops.call(op, *inputs, **attrs)


def test_an_in_place_update_with_no_rows_leaves_everything_as_it_is(rng: np.random.Generator) -> None:
    param, velocity = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    before = param.copy(), velocity.copy()
    out = algoswap.ops.momentum_update_sparse(param, np.zeros(0, np.int64), np.zeros((0, 3)), velocity, lr=0.1,
                                              algorithm="tripwire:direct")
    assert out is param and np.array_equal(param, before[0]) and np.array_equal(velocity, before[1])


def test_an_empty_output_is_made_in_the_backends_memory_space() -> None:
    from algoswap._runner import Runner

    register_boxed([("relu", "direct")])  # gone with the tripwire when the module's tests end
    selection = algoswap.select("relu", [(0, 3)], "float32", "boxed:direct", memory=None)
    out = Runner(selection).run([Box(np.zeros((0, 3), np.float32))])
    assert isinstance(out, Box) and out.shape == (0, 3) and out.dtype == np.float32


def test_the_graph_executor_runs_nothing_on_a_batch_of_zero() -> None:
    x, labels = g.placeholder("x", (0, 5), "float64"), g.placeholder("labels", (0,), "int64")
    w, b = g.parameter("w", np.ones((3, 5))), g.parameter("b", np.zeros(3))
    logits = g.linear(x, w, b)
    loss = g.softmax_cross_entropy(logits, labels)
    executor = g.Executor([logits, loss], backends=["tripwire"])
    got_logits, got_loss = executor.run(feed={x: np.zeros((0, 5)), labels: np.zeros(0, np.int64)})
    assert got_logits.shape == (0, 3) and got_loss.shape == () and np.isnan(got_loss)


torch = pytest.importorskip("torch")
nn = torch.nn


def _net() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.AvgPool2d(2),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 5))


def test_swapped_layers_take_a_batch_of_zero_like_torch() -> None:
    plain, swapped = _net(), _net()
    algoswap.swap_conv2d(swapped, "tripwire:direct")
    for op in ("linear", "relu", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "flatten"):
        algoswap.swap_operation(op, swapped, "tripwire:direct")
    grads = []
    for model in (plain, swapped):
        x = torch.zeros(0, 3, 8, 8, requires_grad=True)
        out = model(x)
        out.sum().backward()
        grads.append((out.shape, x.grad.shape, [p.grad.clone() for p in model.parameters()]))
    (shape, x_shape, expected), (got_shape, got_x_shape, got) = grads
    assert got_shape == shape == (0, 5) and got_x_shape == x_shape
    assert all(torch.equal(a, b) for a, b in zip(got, expected))  # zeros: nothing flows from an empty batch


def test_swap_backend_models_take_a_batch_of_zero_like_torch() -> None:
    module = _net().eval()
    model = algoswap.swap_backend(module, "tripwire:default", sample_input_shape=(2, 3, 8, 8))
    with torch.no_grad():
        expected = module(torch.zeros(0, 3, 8, 8))
    assert model(torch.zeros(0, 3, 8, 8)).shape == expected.shape == (0, 5)
    assert model(np.zeros((0, 3, 8, 8), np.float32)).shape == (0, 5)
