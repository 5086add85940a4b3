"""Every result is checked before it reaches the caller: an implementation returning the wrong shape,
the wrong dtype, None, a list, an array of another memory space, or (in place) a copy, or raising
MemoryError, is an error naming it and its plugin, through ops, the swap API and the graph executor."""

from __future__ import annotations

import types
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from boxed_backend import Box


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def _out_of_memory(*arrays: Any, **attrs: Any) -> Any:
    raise MemoryError("std::bad_alloc")


# What each broken algorithm returns for relu's input x (conv2d's: its input, whatever the output should be).
BROKEN: dict[str, Callable[[np.ndarray], Any]] = {
    "shape": lambda x: _relu(x)[..., :-1],
    "dtype": lambda x: _relu(x).astype(np.float64 if x.dtype == np.float32 else np.float32),
    "none": lambda x: None,
    "list": lambda x: _relu(x).tolist(),
    "memory": lambda x: Box(_relu(x)),  # a device array out of a host backend
}
WORDS = {
    "shape": "of shape", "dtype": "float", "none": "returned None", "list": "returned a list",
    "memory": "returned a float32 boxed_backend.Box",
}


def _wrapped(kind: str, op: str) -> Callable[..., Any]:
    def run(x: np.ndarray, *rest: Any, **attrs: Any) -> Any:
        if op == "conv2d":  # the right output first, then broken the same way
            x = algoswap.ops.conv2d(x, *rest, algorithm="numpy:smm", **attrs)
        return BROKEN[kind](x)

    return run


def _register(registry: Any) -> None:
    registry.add_backend("broken", priority=-50)
    for kind in BROKEN:
        for op in ("relu", "conv2d"):
            registry.add_implementation(op, kind, "broken", _wrapped(kind, op))
    registry.add_implementation("relu", "oom", "broken", _out_of_memory)
    space = algoswap.MemorySpace("boxed", "boxed_backend.Box", to_host=lambda box: box.data, from_host=Box)
    registry.add_backend("broken_box", memory=space, priority=-50)
    registry.add_implementation("relu", "host", "broken_box", lambda box: _relu(box.data))  # a host array out of a device
    registry.add_implementation("sgd_update", "copy", "broken", lambda param, grad, lr: param - lr * grad)


@pytest.fixture(scope="module", autouse=True)
def broken() -> Iterator[None]:
    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=_register)
    assert algoswap.register_plugin(plugin, name="broken").status == "loaded"
    yield
    algoswap.reload_plugins()


def _check(error: algoswap.ImplementationError, op: str, kind: str) -> None:
    message = str(error)
    assert error.implementation == f"broken:{kind}"
    assert f"{op}: implementation broken:{kind} (" in message and "broken" in message.split("(")[1], message
    assert WORDS[kind] in message, message


@pytest.mark.parametrize("kind", BROKEN)
def test_ops_refuse_a_broken_result(kind: str, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    with pytest.raises(algoswap.ImplementationError) as caught:
        algoswap.ops.relu(x, algorithm=f"broken:{kind}")
    _check(caught.value, "relu", kind)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    with pytest.raises(algoswap.ImplementationError) as caught:
        algoswap.ops.conv2d(x, w, None, padding=1, algorithm=f"broken:{kind}")
    _check(caught.value, "conv2d", kind)


def test_a_device_backend_must_return_arrays_of_its_memory(rng: np.random.Generator) -> None:
    with pytest.raises(algoswap.ImplementationError, match=r"relu: implementation broken_box:host \(.*\) returned a float32 "
                       r"numpy.ndarray of shape \(2, 3\); expected a float32 boxed_backend.Box of shape \(2, 3\)"):
        algoswap.ops.relu(rng.standard_normal((2, 3)).astype(np.float32), algorithm="broken_box:host", transfer=True)


def test_an_in_place_op_must_return_its_first_input(rng: np.random.Generator) -> None:
    param, grad = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    with pytest.raises(algoswap.ImplementationError, match=r"sgd_update: implementation broken:copy .*returned a float64 "
                       r"numpy.ndarray of shape \(3, 4\); expected the 'param' array it was given, updated in place"):
        algoswap.ops.sgd_update(param, grad, lr=0.1, algorithm="broken:copy")


def test_a_memory_error_names_the_op_the_implementation_and_the_shapes(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 7)).astype(np.float32)
    with pytest.raises(algoswap.ImplementationMemoryError, match=r"relu: implementation broken:oom \(.*\) ran out of memory "
                       r"for inputs \(2, 7\) float32 \(output \(2, 7\), 56 B\): MemoryError: std::bad_alloc") as caught:
        algoswap.ops.relu(x, algorithm="broken:oom")
    assert isinstance(caught.value, MemoryError) and caught.value.implementation == "broken:oom"


torch = pytest.importorskip("torch")
nn = torch.nn


def _net() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten()).eval()


@pytest.mark.parametrize("kind", BROKEN)
def test_swapped_layers_refuse_a_broken_result(kind: str) -> None:
    x = torch.randn(2, 3, 5, 5)
    conv = algoswap.swap_conv2d(_net(), f"broken:{kind}")
    with pytest.raises(algoswap.ImplementationError) as caught:
        conv(x)
    _check(caught.value, "conv2d", kind)
    relu = algoswap.swap_operation("relu", _net(), f"broken:{kind}")
    with pytest.raises(algoswap.ImplementationError) as caught:
        relu(x)
    _check(caught.value, "relu", kind)


@pytest.mark.parametrize("kind", BROKEN)
def test_swap_backend_models_refuse_a_broken_result(kind: str) -> None:
    model = algoswap.swap_backend(_net(), {"conv2d": f"broken:{kind}"})
    with pytest.raises(algoswap.ImplementationError) as caught:
        model(torch.randn(2, 3, 5, 5))
    _check(caught.value, "conv2d", kind)


@pytest.mark.parametrize("kind", BROKEN)
def test_the_graph_executor_refuses_a_broken_result(kind: str, rng: np.random.Generator) -> None:
    x = g.placeholder("x", (2, 6))
    y = g.op("relu", x, name="act", algorithm=f"broken:{kind}")
    executor = g.Executor([g.op("add_scalar", y, value=1.0)])
    with pytest.raises(algoswap.ImplementationError) as caught:
        executor.run(feed={x: rng.standard_normal((2, 6)).astype(np.float32)})
    _check(caught.value, "relu", kind)
    assert str(caught.value).startswith("node 'act': ")
