"""dropout and dropout2d with the spec's counter-based mask, drawn in the kernel: element (or channel)
i is kept where splitmix64(splitmix64(seed) + i) / 2**64 >= p, the same mask as every backend's. float16
and bfloat16 are scaled in float32 and rounded once (``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from ._types import in_float32

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

# x times the scaled mask (1 / (1 - p) where kept, else 0): a dropped NaN or inf stays non-finite, as in PyTorch
_masked = cp.ElementwiseKernel(
    "T x, uint64 key, float64 p, T scale, int64 group", "T y",
    """
    unsigned long long z = (unsigned long long)(i / group) + key + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    double uniform = (double)(z >> 11) * 1.1102230246251565e-16;
    y = x * (uniform >= p ? scale : (T)0);
    """,
    "algoswap_dropout")


def _splitmix64(z: int) -> int:
    z = (z + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _apply(x: Any, p: float, seed: int, training: bool, group: int) -> Any:
    if not training or p == 0:
        return x.copy()
    key = np.uint64(_splitmix64(seed & _MASK64))
    return _masked(x, key, np.float64(p), x.dtype.type(1 / (1 - p)), np.int64(group))


@in_float32
def dropout(x: Any, *, p: float, seed: int, training: bool) -> Any:
    return _apply(x, p, seed, training, 1)


@in_float32
def dropout_grad(dy: Any, *, p: float, seed: int, training: bool) -> Any:
    """The same mask and scale applied to dy (dropout is linear in its input)."""
    return _apply(dy, p, seed, training, 1)


@in_float32
def dropout2d(x: Any, *, p: float, seed: int, training: bool) -> Any:
    """Whole channels of NCHW input zeroed: channel (n, c) follows element n * C + c of the mask."""
    return _apply(x, p, seed, training, x.shape[2] * x.shape[3])


@in_float32
def dropout2d_grad(dy: Any, *, p: float, seed: int, training: bool) -> Any:
    return _apply(dy, p, seed, training, dy.shape[2] * dy.shape[3])
