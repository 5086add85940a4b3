"""nn.LSTM unrolled over the sample's sequence length onto registry ops (issue 34: timm's Sequencer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import UnsupportedModelError  # noqa: E402
from algoswap.graph import GraphError  # noqa: E402
from lowering_check import Fn, check_lowered, random_input  # noqa: E402


def _output(m: Any, x: torch.Tensor) -> torch.Tensor:
    out, _ = m.rnn(x)
    return out * 2


@pytest.mark.parametrize("batch_first, bidirectional, layers", [(True, True, 1), (False, False, 2), (True, False, 1), (False, True, 2)])
def test_an_lstm_is_unrolled_onto_registry_ops(batch_first: bool, bidirectional: bool, layers: int, rng: np.random.Generator) -> None:
    module = Fn(_output, rnn=nn.LSTM(6, 5, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional))
    shape, other = ((3, 7, 6), (4, 7, 6)) if batch_first else ((7, 3, 6), (7, 4, 6))
    check_lowered(module, shape, ["linear", "sigmoid", "tanh", "split"], rng, other_shape=other, reduction_length=6 * layers * 7)


def test_a_long_sequence_converts_in_time_linear_in_its_length(rng: np.random.Generator) -> None:
    """Each step's ops read the cell state twice: a lowering walked as a tree took time exponential in the steps."""
    check_lowered(Fn(_output, rnn=nn.LSTM(3, 2, batch_first=True)), (2, 40, 3), ["linear"], rng, reduction_length=40)


def test_another_sequence_length_is_refused_with_the_reason(rng: np.random.Generator) -> None:
    model = swap_backend(Fn(_output, rnn=nn.LSTM(6, 5, batch_first=True)).eval(), None, (3, 7, 6))
    with pytest.raises(GraphError, match="unrolled over 7 steps at conversion; this input has 9"):
        model(random_input(rng, (3, 9, 6)))


@pytest.mark.parametrize("forward, words", [
    (lambda m, x: m.rnn(x, (torch.zeros(1, 3, 5), torch.zeros(1, 3, 5)))[0], "initial states"),
    (lambda m, x: m.rnn(x)[1][0], "final states are read"),
])
def test_initial_states_and_final_states_read_are_left_to_pytorch(forward: Any, words: str) -> None:
    module = Fn(forward, rnn=nn.LSTM(6, 5, batch_first=True)).eval()
    with pytest.raises(UnsupportedModelError, match=words):
        swap_backend(module, None, (3, 7, 6), tracer="torch.fx")
    model = swap_backend(module, None, (3, 7, 6), fallback="torch", tracer="torch.fx")
    x = torch.randn(3, 7, 6)
    with torch.no_grad():
        torch.testing.assert_close(model(x), module(x))
