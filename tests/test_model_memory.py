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
from algoswap._torch.errors import ConversionError  # noqa: E402  (needs torch)


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
    requests = {**{op: "boxed:default" for op in ("conv2d", "relu", "add")}, "flatten": "numpy:default"}
    model = algoswap.swap_backend(module, requests, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    MOVES.update(up=0, down=0)
    got = model(x)
    assert_close(got, expected, **network_terms(module))
    # the weights (2 weights, 2 biases) went up once, when the sample input was planned; each call
    # moves the input up, and nothing comes back until flatten (numpy)
    assert MOVES == {"up": 1, "down": 1}, MOVES
    model(x)
    assert MOVES == {"up": 2, "down": 2}, MOVES
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
    model = algoswap.swap_backend(module, {"conv2d": "boxed:default", "flatten": "numpy:default"}, tuple(x.shape))
    with torch.no_grad():
        expected = module(x)
    assert_close(model(x), expected, **network_terms(module))
    rows = list(model.explain())
    assert [row.implementation for row in rows if "+" in row.op] == ["boxed:smm", "boxed:smm"]
    assert model.backends() == sorted({row.implementation.split(":")[0] for row in rows})


def test_a_default_request_stays_in_the_memory_of_its_inputs(boxed: None) -> None:
    """The placement policy: flatten has no boxed implementation, and its input is in boxed memory.
    A default request never moves it to a host backend: without a fallback the conversion names the
    node; with fallback="torch" it runs in PyTorch and its result goes back into boxed memory."""
    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    requests = {"conv2d": "boxed:default"}
    with pytest.raises(ConversionError, match=r"(?s)layer 'head' \(flatten, input \(2, 8, 6, 6\)\).*in boxed memory"):
        algoswap.swap_backend(module, requests, tuple(x.shape))
    model = algoswap.swap_backend(module, requests, tuple(x.shape), fallback="torch")
    with torch.no_grad():
        expected = module(x)
    MOVES.update(up=0, down=0)
    assert_close(model(x), expected, **network_terms(module))
    rows = {row.name: row for row in model.explain()}
    assert rows["head"].implementation == "torch (fallback) (via host, for boxed)", rows["head"]
    assert "no implementation in boxed memory" in rows["head"].note
    assert model.backends() == ["boxed"]  # every registry op of the model ran there
    # up: the input, flatten's result back (the weights went up when planning); down: flatten's input
    # for torch, the output
    assert MOVES == {"up": 2, "down": 2}, MOVES


def test_an_array_already_in_the_backends_memory_is_not_moved(boxed: None) -> None:
    """Fed an array of the boxed memory space, the model reads it there: only the weights go up, once for
    every program (the sample input's, planned for host inputs, and the boxed input's)."""
    from boxed_backend import Box

    module = Block().eval()
    x = torch.randn(2, 3, 6, 6)
    requests = {op: "boxed:default" for op in ("conv2d", "relu", "add", "flatten")}
    requests["flatten"] = "numpy:default"
    MOVES.update(up=0, down=0)
    model = algoswap.swap_backend(module, requests, tuple(x.shape))
    assert MOVES == {"up": 4, "down": 0}, MOVES  # 2 weights and 2 biases up, when planning
    with torch.no_grad():
        expected = module(x)
    got = model.run(Box(x.numpy()))
    assert MOVES == {"up": 4, "down": 1}, MOVES  # the weights' copies shared; flatten's input down
    assert_close(got, expected, **network_terms(module))
