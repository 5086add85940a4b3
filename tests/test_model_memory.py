"""A Model keeps values in a backend's memory space between consecutive steps of that backend.

The backend here is the test backend of boxed_backend.py (its own memory space "boxed", every move
between host and box counted).
"""

from __future__ import annotations

from typing import Iterator

import pytest

import algoswap
from boxed_backend import MOVES, register_boxed
from helpers import assert_close, network_terms

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.fixture
def boxed() -> Iterator[None]:
    register_boxed([("conv2d", "smm"), ("conv2d_fused", "smm"), ("relu", "direct"), ("add", "direct")])
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
    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    model = algoswap.swap_backend(module, {op: "boxed:default" for op in ("conv2d", "relu", "add")}, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    MOVES.update(up=0, down=0)
    got = model(x)
    assert_close(got, expected, **network_terms(module))
    # weights: 4 uploads (2 weights, 2 biases); the input: 1; nothing comes back until flatten (numpy)
    assert MOVES == {"up": 5, "down": 1}, MOVES
    rows = {row.name: row for row in model.explain()}
    assert rows["a"].implementation == "boxed:smm" and "inputs moved host → boxed" in rows["a"].note
    assert "moved" not in rows["b"].note and rows["head"].implementation.startswith("numpy:")
    assert "inputs moved boxed → host" in rows["head"].note


def test_default_requests_never_leave_host_memory(boxed: None) -> None:
    module = Block().eval()
    model = algoswap.swap_backend(module, sample_input_shape=(1, 3, 6, 6))
    model(torch.randn(1, 3, 6, 6))
    assert MOVES == {"up": 0, "down": 0} and "boxed" not in model.backends()


def test_backends_lists_what_ran_in_fused_chains(boxed: None) -> None:
    """A chain fused on the boxed backend: its add and relu never ran on their own, so the host
    backends their sample-input preselection named are not among the model's backends."""
    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    model = algoswap.swap_backend(module, {"conv2d": "boxed:default"}, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    assert_close(model(x), expected, **network_terms(module))
    rows = list(model.explain())
    assert [row.implementation for row in rows if "+" in row.op] == ["boxed:smm", "boxed:smm"]
    assert model.backends() == sorted({row.implementation.split(":")[0] for row in rows})
