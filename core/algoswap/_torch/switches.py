"""torch's own switches as the wishes of a swapped call (``algoswap._wishes``): TF32 per kind of op and
timed engine choice, read at each call through the C getters torch's attributes call (a tenth of
their cost)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from .._wishes import WISHES, Wishes


def torch_tf32() -> tuple[bool, bool]:
    """torch's TF32 switches as they are now: (convolutions, matrix products), i.e.
    ``torch.backends.cudnn.allow_tf32`` and ``torch.backends.cuda.matmul.allow_tf32``."""
    try:
        return torch._C._get_cudnn_allow_tf32(), torch._C._get_cublas_allow_tf32()
    except RuntimeError:  # torch >= 2.9 refuses when its legacy and fp32_precision settings disagree: the latter's
        return _fp32_precision("conv") == "tf32", _fp32_precision("matmul") == "tf32"


def _fp32_precision(op: str) -> str:
    """torch's ``fp32_precision`` for CUDA ops of ``op``: its own, else the CUDA backend's, else the global one."""
    for backend, kind in (("cuda", op), ("cuda", "all"), ("generic", "all")):
        precision = str(torch._C._get_fp32_precision_getter(backend, kind))
        if precision != "none":
            return precision
    return "none"


# Every Wishes torch's switches can make, by [conv TF32][matmul TF32][benchmark]: made once, not at each call
_ALL = [[[Wishes(conv, matmul, timed) for timed in (False, True)] for matmul in (False, True)] for conv in (False, True)]


def torch_wishes() -> Wishes:
    """The wishes torch's switches make now: TF32 as ``torch_tf32`` reads it, and timed engine choice as
    ``torch.backends.cudnn.benchmark`` says."""
    conv, matmul = torch_tf32()
    return _ALL[conv][matmul][torch._C._get_cudnn_benchmark()]


@contextmanager
def following_torch() -> Iterator[None]:
    """Within the block, wish what torch's switches say now (as each swapped call does)."""
    token = WISHES.set(torch_wishes())
    try:
        yield
    finally:
        WISHES.reset(token)
