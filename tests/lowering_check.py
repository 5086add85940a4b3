"""Checking swap_backend's lowering of one small torch module (tests/ is on sys.path).

``check_lowered(module, shape, ops, rng)`` converts the module with no fallback allowed (every node
must lower to registry ops), runs it on fresh random inputs of the sample shape and of a second
shape (each new shape is planned anew: sizes computed when planning must follow), compares with
PyTorch under the policy of tests/helpers.py, and checks that explain() shows the expected ops.
``requires_ops`` skips a test only while an op it needs is missing from the registry (ops other
engineers are adding), saying so.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pytest
import torch
from torch import nn

import algoswap
from algoswap._torch.convert import swap_backend
from algoswap._torch.model import Model
from helpers import assert_close


class Fn(nn.Module):
    """A module whose forward is ``fn(self, x)`` (traced through), holding ``parts`` (modules, parameters)."""

    def __init__(self, fn: Callable[..., Any], **parts: Any) -> None:
        super().__init__()
        self.fn = fn
        for name, part in parts.items():
            setattr(self, name, part)

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self, x)


def requires_ops(*ops: str) -> None:
    """Skip while the registry lacks one of ``ops`` (each lowering's test runs once the op is merged)."""
    missing = [op for op in ops if op not in algoswap.registry().ops]
    if missing:
        pytest.skip(f"the registry has no op {', '.join(map(repr, missing))} yet (another branch adds it); "
                    "this lowering is tested once it is registered")


def random_input(rng: np.random.Generator, shape: Sequence[int]) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(tuple(shape)).astype(np.float32))


def check_lowered(module: nn.Module, shape: Sequence[int], ops: Sequence[str], rng: np.random.Generator, *,
                  other_shape: Sequence[int] | None = None, reduction_length: int = 1,
                  scale: Callable[[torch.Tensor], Any] | None = None) -> Model:
    """Convert ``module`` (eval mode, no fallback), compare with PyTorch at ``shape`` and ``other_shape``
    (default: one more in the batch), and check explain() names each of ``ops`` and nothing in torch.

    The bound: every op rounds its result once (``layers`` = the number of op rows), and the longest
    sum of one element has ``reduction_length`` terms; ``scale(x)`` gives the terms' magnitudes where
    the result can cancel (a mean: the mean of |x|)."""
    requires_ops(*ops)
    module = module.eval()
    model = swap_backend(module, None, tuple(shape))
    rows = model.explain()
    shown = [row.op for row in rows]
    assert not [row for row in rows if row.implementation.startswith("torch")], rows
    for op in ops:
        assert op in shown, f"{op} not in explain(): {shown}"
    for size in (tuple(shape), tuple(other_shape) if other_shape is not None else (shape[0] + 1, *shape[1:])):
        x = random_input(rng, size)
        with torch.no_grad():
            ref = module(x)
        out = model(x)
        for got, want in zip(_flat(out), _flat(ref)):
            assert_close(got, want, layers=len(rows), reduction_length=reduction_length,
                         scale=None if scale is None else scale(x), context=f"input {size}")
    return model


def _flat(value: Any) -> list[Any]:
    return [v for item in value for v in _flat(item)] if isinstance(value, (list, tuple)) else [value]
