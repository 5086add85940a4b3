"""A Model keeps values in a backend's memory space between consecutive steps of that backend.

The backend here is a test fixture registered in-process: its arrays are numpy arrays wrapped in
a box (its own memory space "boxed"), its kernels unbox, call the reference, and box again, and
every move between host and box is counted.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from helpers import relative_error

torch = pytest.importorskip("torch")
nn = torch.nn

MOVES = {"up": 0, "down": 0}


@dataclass
class Box:
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def _upload(array: Any) -> Box:
    MOVES["up"] += 1
    return Box(np.ascontiguousarray(array))


def _download(box: Box) -> np.ndarray:
    MOVES["down"] += 1
    return box.data.copy()


def _boxed(op: str, algorithm: str) -> Any:
    def run(*inputs: Any, **attrs: Any) -> Box:
        assert all(a is None or isinstance(a, Box) for a in inputs), "a host array reached a boxed kernel"
        arrays = [None if a is None else a.data for a in inputs]
        return Box(algoswap.ops.call(op, *arrays, algorithm=f"numpy:{algorithm}", **attrs))

    return run


@pytest.fixture
def boxed() -> Iterator[None]:
    def register(registry: Any) -> None:
        space = algoswap.MemorySpace("boxed", "Box", to_host=_download, from_host=_upload)
        registry.add_backend("boxed", memory=space, priority=-5)
        for op, algorithm in (("conv2d", "smm"), ("conv2d_fused", "smm"), ("relu", "direct"), ("add", "direct")):
            registry.add_implementation(op, algorithm, "boxed", _boxed(op, algorithm))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="boxed").status == "loaded"
    MOVES.update(up=0, down=0)
    yield
    algoswap.reload_plugins()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Flatten()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return self.head(torch.relu(self.b(y) + y))


def test_values_stay_in_the_backends_memory_between_its_steps(boxed: None) -> None:
    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    model = algoswap.swap_backend(module, {op: "boxed:default" for op in ("conv2d", "relu", "add")}, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    MOVES.update(up=0, down=0)
    got = model(x)
    assert relative_error(got, expected) <= 1e-5
    # weights: 4 uploads (2 weights, 2 biases); the input: 1; nothing comes back until flatten (numpy)
    assert MOVES == {"up": 5, "down": 1}, MOVES
    rows = {row.name: row for row in model.explain()}
    assert rows["a"].implementation == "boxed:smm" and "inputs moved host → boxed" in rows["a"].note
    assert "moved" not in rows["b"].note and rows["head"].implementation.startswith("numpy:")
    assert "inputs moved boxed → host" in rows["head"].note


def test_default_requests_never_leave_host_memory(boxed: None) -> None:
    torch.manual_seed(0)
    module = Block().eval()
    model = algoswap.swap_backend(module, sample_input_shape=(1, 3, 6, 6))
    model(torch.randn(1, 3, 6, 6))
    assert MOVES == {"up": 0, "down": 0} and "boxed" not in model.backends()


def test_backends_lists_what_ran_in_fused_chains(boxed: None) -> None:
    """A chain fused on the boxed backend: its add and relu never ran on their own, so the host
    backends their sample-input preselection named are not among the model's backends."""
    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    model = algoswap.swap_backend(module, {"conv2d": "boxed:default"}, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    assert relative_error(model(x), expected) <= 1e-5
    rows = list(model.explain())
    assert [row.implementation for row in rows if "+" in row.op] == ["boxed:smm", "boxed:smm"]
    assert model.backends() == sorted({row.implementation.split(":")[0] for row in rows})
