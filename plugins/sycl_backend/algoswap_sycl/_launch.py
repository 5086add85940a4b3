"""Launch helpers shared by the op modules: device inputs, results in the caller's memory, the tiled
matrix product, transposes and sums."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from algoswap import freeze

from ._device import Context, Long, SyclArray, context

# Must match kernels/matmul.cl: rows per work-item, columns per work-item, work-items per group, panel depth.
TM, VN, WGN, KT = 8, 32, 4, 64
INT_LIMIT = 2**31 - 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def start(*arrays: Any) -> tuple[Context, np.dtype, list[SyclArray]]:
    """The device context, the dtype of the first array, and each array on the device."""
    ctx = context()
    return ctx, np.dtype(arrays[0].dtype), [ctx.device(a) for a in arrays]


def optional(ctx: Context, array: Any) -> SyclArray | None:
    """An optional input (a bias) on the device, or None."""
    return None if array is None else ctx.device(array)


def finish(ctx: Context, out: SyclArray, inputs: Sequence[Any]) -> Any:
    """Wait for the queue (temporaries go back to the pool); the result stays on the device if an input came as a SyclArray, else it
    is returned as a host numpy array (a view of the shared USM memory, no copy)."""
    ctx.wait()
    if any(isinstance(a, SyclArray) for a in inputs):
        return out
    return out.host_view()


def dummy(ctx: Context, dtype: np.dtype) -> SyclArray:
    """A one-element buffer standing in for an absent optional argument."""
    return ctx.resident(_DUMMIES.setdefault(dtype.str, np.zeros(1, dtype)), "dummy", ctx.upload)


_DUMMIES: dict[str, np.ndarray] = {a.dtype.str: freeze(a) for a in (np.zeros(1, np.float32), np.zeros(1, np.float64))}


def gemm(ctx: Context, dtype: np.dtype, a: SyclArray, b: SyclArray, c: SyclArray, *, m: int, n: int, k: int,
         sam: int, sak: int, ldb: int, ldc: int, groups: int = 1, batches: int = 1, a_g: int = 0, b_n: int = 0,
         b_g: int = 0, c_n: int = 0, c_g: int = 0, bias: SyclArray | None = None, bias_mode: int = 0,
         b_padded: bool = False, c_off: int = 0, panel: int = 0) -> None:
    """C = A @ B (+ bias) per (batch, group) on the tiled matrix-product kernel (see kernels/matmul.cl). B is
    row-major with rows ldb apart, or (``panel``) stored in panels of that many columns, each K x ldb."""
    pv = panel or n
    args = [a, b, c, bias if bias is not None else dummy(ctx, dtype), m, n, k, sam, sak, ldb, pv,
            Long(k * ldb if panel else 0), ldc, groups, Long(a_g), Long(b_n), Long(b_g), Long(c_n), Long(c_g),
            bias_mode, int(b_padded), Long(c_off)]
    tiles = ceil_div(n, pv) * ceil_div(pv, VN)
    if ctx.local_panel:  # work-groups of WGN work-items along the columns share a panel of A
        ctx.run(dtype, "gemm", args, [batches * groups, ceil_div(m, TM), round_up(tiles, WGN)], [1, 1, WGN])
    else:  # row blocks fastest: the blocks that read the same columns of B run one after another
        ctx.run(dtype, "gemm", args, [batches * groups, tiles, ceil_div(m, TM)])


def swap01(ctx: Context, dtype: np.dtype, x: SyclArray, a: int, b: int, c: int, temporary: bool = True) -> SyclArray:
    """out[b, a, c] = x[a, b, c]."""
    out = ctx.empty((b, a, c), dtype, temporary)
    ctx.run(dtype, "swap01", [x, out, a, b, c, Long(0)], [a, b, c])
    return out


def sum02(ctx: Context, dtype: np.dtype, x: SyclArray, a: int, b: int, c: int) -> SyclArray:
    """out[b] = x[a, b, c] summed over a and c."""
    out = ctx.empty((b,), dtype)
    ctx.run(dtype, "sum02", [x, out, a, b, c], [b])
    return out


def gemm_kernel_name(ctx: Context) -> str:
    panel = (f"{WGN} work-items sharing a {TM}x{KT} local-memory panel of A" if ctx.local_panel
             else "A read in place (CPU device: no local-memory staging)")
    return f"gemm: {TM}x{VN} register tile per work-item (vload16 rows of B), {panel}, on {ctx.describe()}"


def supports_dtype_and_size(call: Any) -> bool | str:
    """float64 only where the device has it; every array indexable with 32-bit ints."""
    ctx = context()
    if call.dtype == "float64" and not ctx.fp64:
        return f"the SYCL device {ctx.describe()} has no float64 (cl_khr_fp64)"
    for shape in list(call.shapes) + [call.out_shape]:
        if shape is not None and math.prod(shape) > INT_LIMIT // 16:
            return f"arrays of more than {INT_LIMIT // 16} elements (these kernels index with 32-bit ints)"
    for name, value in call.attrs.items():
        if any(abs(v) > INT_LIMIT // 16 for v in _ints(value)):
            return f"{name}={value!r}: integer attributes above {INT_LIMIT // 16} (these kernels index with 32-bit ints)"
    return True


def _ints(value: Any) -> list[int]:
    """The ints in an attribute value (through tuples: strides, paddings, shapes)."""
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _ints(item)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []
