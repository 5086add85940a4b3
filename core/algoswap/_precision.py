"""The caller's wishes for TF32, per kind of op, carried to the backends that run the ops.

TF32 multiplies float32 operands rounded to 10 mantissa bits (tensor cores on NVIDIA GPUs since
Ampere): much faster, less precise. Whether it runs is each backend's decision; the core only
carries what the caller wishes for the duration of a call:

- ``conv``: convolutions (cuDNN's, in torch's terms ``torch.backends.cudnn.allow_tf32``);
- ``matmul``: matrix products (linear layers, matmul, attention; ``torch.backends.cuda.matmul.allow_tf32``).

Each wish is True, False or None (no wish: the backend's own default). The torch front ends
(``swap_backend`` Models and layers swapped by ``swap_conv2d`` / ``swap_operation``) wish what
torch's switches say at each call, so a swapped model computes as the model it replaces; the
functional API (``algoswap.ops``, an ``Executor``) wishes nothing unless its caller does::

    with algoswap.tf32_wishes(conv=True, matmul=False):
        algoswap.ops.conv2d(x, w, b)

A backend reads the wish when it runs (``algoswap.tf32_wish("conv")``: one ContextVar read) and may
let its own switches override it (the CUDA backend's ``ALGOSWAP_CUDA_TF32`` and ``set_tf32``).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from ._errors import OpArgumentError

TF32_KINDS = ("conv", "matmul")

# (conv, matmul): set by ``tf32_wishes`` and, straight through set/reset, by the torch front ends.
WISHES: ContextVar[tuple[bool | None, bool | None]] = ContextVar("algoswap_tf32_wishes", default=(None, None))


def tf32_wish(kind: str) -> bool | None:
    """The caller's TF32 wish for ops of ``kind`` ("conv" or "matmul") in the running call: True,
    False or None (no wish). For backends, at run time."""
    if kind == "conv":
        return WISHES.get()[0]
    if kind == "matmul":
        return WISHES.get()[1]
    raise OpArgumentError("tf32_wish", "kind", kind, f"one of {', '.join(map(repr, TF32_KINDS))}")


@contextmanager
def tf32_wishes(conv: bool | None = None, matmul: bool | None = None) -> Iterator[None]:
    """Within the block, wish TF32 on (True) or off (False) for convolutions and for matrix products;
    None: no wish (each backend's default). The block's wishes replace those outside it; they are
    restored when it ends (per thread and asyncio task: a ContextVar)."""
    for name, value in (("conv", conv), ("matmul", matmul)):
        if value is not None and not isinstance(value, bool):
            raise OpArgumentError("tf32_wishes", name, value, "True, False or None")
    token = WISHES.set((conv, matmul))
    try:
        yield
    finally:
        WISHES.reset(token)
