"""softmax and log_softmax along one axis, and their gradients from the outputs (CuPy reductions; the
softmax over the last axis as one kernel, ``_passes.softmax_rows``, in every float dtype). The CuPy
expressions compute float16 and bfloat16 in float32, rounded once (``_types.in_float32``)."""

from __future__ import annotations

from typing import Any

import cupy as cp

from . import _passes
from ._types import in_float32


def _shifted(x: Any, axis: int) -> Any:
    return x - x.max(axis=axis, keepdims=True)


def softmax(x: Any, *, axis: int) -> Any:
    if x.ndim and axis % x.ndim == x.ndim - 1:
        return _passes.softmax_rows(x)
    return _softmax(x, axis)


@in_float32
def _softmax(x: Any, axis: int) -> Any:
    e = cp.exp(_shifted(x, axis))
    return e / e.sum(axis=axis, keepdims=True)


@in_float32
def log_softmax(x: Any, *, axis: int) -> Any:
    s = _shifted(x, axis)
    return s - cp.log(cp.exp(s).sum(axis=axis, keepdims=True))


@in_float32
def softmax_grad(dy: Any, y: Any, *, axis: int) -> Any:
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


@in_float32
def log_softmax_grad(dy: Any, y: Any, *, axis: int) -> Any:
    return dy - cp.exp(y) * dy.sum(axis=axis, keepdims=True)
