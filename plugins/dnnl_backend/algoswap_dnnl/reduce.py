"""reduce_sum, reduce_mean and reduce_max on oneDNN, run in the input's own memory order (no copy where
the input is a permuted C-contiguous array, channels-last ones among them).

With its size-1 axes dropped and neighbouring reduced (or kept) axes merged, the input's memory is
(outer, n, inner), the n elements of each reduction in the middle:
- inner == 1 (they are innermost in memory): the reduction primitive on (outer, n) rows, with its jit
  kernel (oneDNN 3.2 runs its reference kernel, 100-1000x slower, for reductions over other axes);
- otherwise: a pooling window over them, the memory seen as NHWC (outer, inner channels, n rows, one
  column): average pooling (times n for a sum) or max pooling (SE blocks: the mean over H, W of a
  channels-last activation).
Both follow PyTorch for NaN and infinities (a maximum over a NaN is NaN: src/reduce.cpp, src/pool.cpp).
Axes that are not one run of the memory (axes 0 and 2 of a C-contiguous 3-D array) are refused; a
channels-last input whose axes are not one run in its own memory is copied to C order first.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ._ext import dnnl, refusal
from ._layout import memory_order

Axes = tuple[int, ...]
Runs = tuple[int, int, int]  # (outer, n, inner)
_POOLING = {"sum": "avg_exclude", "mean": "avg_exclude", "max": "max"}


def runs(shape: Sequence[int], reduced: Sequence[bool]) -> Runs | None:
    """(outer, n, inner) of a C-contiguous array of ``shape`` reduced along the axes flagged, or None
    where those axes (of size > 1) are not one run."""
    blocks: list[list[Any]] = []  # [reduced, size] of each run
    for size, flag in zip(shape, reduced):
        if size == 1:
            continue
        if blocks and blocks[-1][0] == flag:
            blocks[-1][1] *= size
        else:
            blocks.append([flag, size])
    at = [i for i, (flag, _) in enumerate(blocks) if flag]
    if len(at) > 1:
        return None
    if not at:
        return math.prod(size for _, size in blocks), 1, 1
    outer, inner = (math.prod(size for _, size in part) for part in (blocks[: at[0]], blocks[at[0] + 1:]))
    return outer, blocks[at[0]][1], inner


def _pool_window(kind: str, n: int) -> dict[str, Any]:
    return {"kernel": [n, 1], "stride": [1, 1], "dilation": [1, 1], "padding_l": [0, 0], "padding_r": [0, 0],
            "kind": _POOLING[kind], "scale": float(n) if kind == "sum" else 1.0}


def _reduce_memory(kind: str, memory: np.ndarray, found: Runs) -> np.ndarray:
    """The (outer, inner) result of reducing C-contiguous ``memory`` of the runs ``found``."""
    outer, n, inner = found
    if n == 1:
        return memory.reshape(outer, inner).copy()
    if inner == 1:
        return dnnl.reduce(memory.reshape(outer, n), kind).reshape(outer, 1)
    pooled = dnnl.pool2d_forward(memory.reshape(outer, n, 1, inner), channels_last=True, **_pool_window(kind, n))
    return pooled.reshape(outer, inner)


def _reduce(kind: str, x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
    memory, order = memory_order(x)
    found = runs(memory.shape, [axis in axes for axis in order])
    if found is None:  # not one run in this memory order: in C order (supports() checked that it is one there)
        memory, order = np.ascontiguousarray(x), tuple(range(x.ndim))
        found = c_order_runs(x.shape, axes)
    kept = [axis for axis in order if axis not in axes]
    out = _reduce_memory(kind, memory, found).reshape([x.shape[axis] for axis in kept]).transpose(np.argsort(kept))
    return np.expand_dims(out, axes) if keepdims else out


def reduce_sum(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    return _reduce("sum", x, axes, keepdims)


def reduce_mean(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    return _reduce("mean", x, axes, keepdims)


def reduce_max(x: np.ndarray, *, axes: Axes, keepdims: bool) -> np.ndarray:
    return _reduce("max", x, axes, keepdims)


# ---------------------------------------------------------------------- selection and kernels


def _kind(op: str) -> str:
    return op.removeprefix("reduce_")


def c_order_runs(shape: Sequence[int], axes: Axes) -> Runs:
    """The runs of a C-contiguous array (ValueError: why the axes are not one)."""
    found = runs(shape, [axis in axes for axis in range(len(shape))])
    if found is None:
        raise ValueError(f"the reduced axes {axes} of shape {tuple(shape)} are not one run of the memory (oneDNN 3.2's "
                         "reduction primitive would run its reference kernel, and no pooling window covers them)")
    return found


def _plan(call: Any) -> tuple[str, Any]:
    """(what runs, its plan) for a C-contiguous input (ValueError: why none)."""
    outer, n, inner = c_order_runs(call.shape("input"), call.attrs["axes"])
    if n == 1:
        return "a copy (the reduced axes have size 1)", None
    if inner == 1:
        return "oneDNN reduction", dnnl.reduce_impl(outer, n, _kind(call.op))
    window = _pool_window(_kind(call.op), n)
    return "oneDNN pooling over the reduced elements", dnnl.pool2d_forward_impl([outer, inner, n, 1], channels_last=True, **window)


def supports(call: Any) -> bool | str:
    """One run of reduced axes, and a primitive with a real (not reference) kernel."""
    answer = refusal(lambda: _plan(call)[1])
    if answer is not True:
        return answer
    what, plan = _plan(call)
    if plan is not None and str(plan.impl).startswith("ref"):
        return f"{what} has only its reference kernel ({plan.impl}) for shape {call.shape('input')} over axes {call.attrs['axes']}"
    return True


def kernel(call: Any) -> str:
    what, plan = _plan(call)
    return what if plan is None else f"{what} ({plan.impl})"
