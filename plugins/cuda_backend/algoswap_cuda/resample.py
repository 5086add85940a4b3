"""interpolate and its gradient: our CUDA kernels (_kernels.INTERPOLATE), one thread per output element,
reading the taps torch reads (algoswap.interpolation_taps, copied to the GPU once per geometry). For float16
and bfloat16 the weights and the arithmetic are float32 (as torch's), the gradient adds into float32 and is
rounded once."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from algoswap import LRUCache, declare_cache, interpolation_taps

from . import _kernels
from ._runtime import contiguous, dtype_name
from ._types import accumulation, rounded

Pair = tuple[int, int]
TABLES = declare_cache("cuda_interpolation_taps", 256, "CUDA: interpolate's taps on the GPU, per axis geometry, dtype and device")
_tables: LRUCache[tuple[Any, Any]] = LRUCache(TABLES)


def _device_taps(size: int, out: int, factor: float | None, mode: str, align_corners: Any, dtype: Any,
                 gradient: bool) -> tuple[Any, Any]:
    """((out, k) int32 indices, (out, k) weights of ``dtype``'s accumulation dtype) on the current GPU."""
    key = (size, out, factor, mode, align_corners, str(dtype), gradient, cp.cuda.runtime.getDevice())
    found = _tables.get(key)
    if found is None:
        indices, weights = interpolation_taps(size, out, factor, mode, align_corners, str(dtype), gradient)
        found = _tables.put(key, (cp.asarray(indices.astype(np.int32)), cp.asarray(weights.astype(accumulation(dtype)))))
    return found


def _launch(name: str, source: Any, target: Any, extents: Pair, outputs: Pair, scale_factor: Any, mode: str,
            align_corners: Any, count: int) -> None:
    """Run ``name`` over ``count`` outputs of interpolating planes of ``extents`` to ``outputs``."""
    rows, cols = (_device_taps(extents[axis], outputs[axis], None if scale_factor is None else scale_factor[axis], mode,
                               align_corners, source.dtype, name == "interpolate_grad") for axis in range(2))
    planes = int(source.shape[0] * source.shape[1])
    _kernels.launch(_kernels.INTERPOLATE, name, dtype_name(source.dtype), count, (source, target, rows[0], cols[0], rows[1], cols[1]),
                    planes, *extents, *outputs, rows[0].shape[1], cols[0].shape[1])


def interpolate(x: Any, *, size: Pair, scale_factor: Any, mode: str, align_corners: Any, recompute_scale_factor: Any) -> Any:
    x = contiguous(x)
    y = cp.empty((*x.shape[:2], *size), dtype=x.dtype)
    _launch("interpolate", x, y, x.shape[2:], size, scale_factor, mode, align_corners, y.size)
    return y


def interpolate_grad(dy: Any, *, input_size: tuple[int, ...], scale_factor: Any, mode: str, align_corners: Any) -> Any:
    dy = contiguous(dy)
    if mode == "bicubic" and dy.shape[2:] == tuple(input_size[2:]):
        return dy.copy()  # torch's bicubic gradient copies planes of the same size (its forward does not)
    dx = cp.zeros(input_size, dtype=accumulation(dy.dtype))
    _launch("interpolate_grad", dy, dx, input_size[2:], dy.shape[2:], scale_factor, mode, align_corners, dy.size)
    return rounded(dx, dy.dtype)
