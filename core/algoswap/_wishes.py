"""The caller's wishes, carried to the backends that run the ops: TF32 per kind of op, and whether
engines may be chosen by timing.

- TF32 multiplies float32 operands rounded to 10 mantissa bits (tensor cores on NVIDIA GPUs since
  Ampere): much faster, less precise. Per kind: ``conv``, convolutions (in torch's terms
  ``torch.backends.cudnn.allow_tf32``); ``matmul``, matrix products (linear layers, matmul,
  attention; ``torch.backends.cuda.matmul.allow_tf32``).
- Benchmark: a backend whose default picks an engine by heuristics may time its candidates once
  per layer geometry and keep the fastest instead (``torch.backends.cudnn.benchmark``).

Each wish is True, False or None (no wish: the backend's own default). Whether it is honoured is
each backend's decision; the core only carries the wishes for the duration of a call. The torch
front ends (``swap_backend`` Models and layers swapped by ``swap_conv2d`` / ``swap_operation``)
wish what torch's switches say at each call, so a swapped model computes as the model it replaces;
the functional API (``algoswap.ops``, an ``Executor``) wishes nothing unless its caller does::

    with algoswap.tf32_wishes(conv=True, matmul=False):
        algoswap.ops.conv2d(x, w, b)

A backend reads a wish when it runs (``algoswap.tf32_wish("conv")``, ``algoswap.benchmark_wish()``:
one ContextVar read each) and may let its own switches override it (the CUDA backend's
``ALGOSWAP_CUDA_TF32`` / ``set_tf32`` and ``ALGOSWAP_CUDA_BENCHMARK`` / ``set_benchmark``).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, NamedTuple

from ._errors import OpArgumentError

TF32_KINDS = ("conv", "matmul")


class Wishes(NamedTuple):
    """Every wish of the running call (None: no wish)."""

    tf32_conv: bool | None = None
    tf32_matmul: bool | None = None
    benchmark: bool | None = None


# Set by ``tf32_wishes`` and, straight through set/reset, by the torch front ends (their ``torch_wishes``).
WISHES: ContextVar[Wishes] = ContextVar("algoswap_wishes", default=Wishes())


def tf32_wish(kind: str) -> bool | None:
    """The caller's TF32 wish for ops of ``kind`` ("conv" or "matmul") in the running call: True,
    False or None (no wish). For backends, at run time."""
    if kind == "conv":
        return WISHES.get().tf32_conv
    if kind == "matmul":
        return WISHES.get().tf32_matmul
    raise OpArgumentError("tf32_wish", "kind", kind, f"one of {', '.join(map(repr, TF32_KINDS))}")


def benchmark_wish() -> bool | None:
    """The caller's wish that engines be chosen by timing in the running call (a swapped torch model
    passes ``torch.backends.cudnn.benchmark``): True, False or None (no wish). For backends, at run time."""
    return WISHES.get().benchmark


@contextmanager
def tf32_wishes(conv: bool | None = None, matmul: bool | None = None) -> Iterator[None]:
    """Within the block, wish TF32 on (True) or off (False) for convolutions and for matrix products;
    None: no wish (each backend's default). The block's TF32 wishes replace those outside it; they are
    restored when it ends (per thread and asyncio task: a ContextVar)."""
    for name, value in (("conv", conv), ("matmul", matmul)):
        if value is not None and not isinstance(value, bool):
            raise OpArgumentError("tf32_wishes", name, value, "True, False or None")
    token = WISHES.set(WISHES.get()._replace(tf32_conv=conv, tf32_matmul=matmul))
    try:
        yield
    finally:
        WISHES.reset(token)
