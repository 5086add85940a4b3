"""linear and its gradients on the tiled matrix-product kernel (leading dimensions folded into rows)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from algoswap import is_frozen

from ._device import Context, SyclArray, context
from ._launch import finish, gemm, gemm_kernel_name, optional, start, sum02, swap01


def _transposed(ctx: Context, dtype: np.dtype, w: Any) -> SyclArray:
    """w.T on the device; for frozen host weights (a Model's), made once and kept while w lives."""
    def make(array: Any, temporary: bool = False) -> SyclArray:
        return swap01(ctx, dtype, ctx.device(array), array.shape[0], array.shape[1], 1, temporary)

    if is_frozen(w):
        return ctx.resident(w, "transposed", make)
    return make(w, temporary=True)


def linear(x: Any, w: Any, b: Any) -> Any:
    """x @ w.T + b: the weight transposed on the device, the bias added in the product's epilogue."""
    ctx, dtype, (xd,) = start(x)
    bd = optional(ctx, b)
    rows, features, outputs = math.prod(x.shape[:-1]), x.shape[-1], w.shape[0]
    y = ctx.empty(tuple(x.shape[:-1]) + (outputs,), dtype)
    gemm(ctx, dtype, xd, _transposed(ctx, dtype, w), y, m=rows, n=outputs, k=features, sam=features, sak=1,
         ldb=outputs, ldc=outputs, bias=bd, bias_mode=0 if bd is None else 2)
    return finish(ctx, y, (x, w, b))


def linear_grad_input(dy: Any, w: Any) -> Any:
    """dy @ w."""
    ctx, dtype, (dyd, wd) = start(dy, w)
    rows, outputs, features = math.prod(dy.shape[:-1]), w.shape[0], w.shape[1]
    dx = ctx.empty(tuple(dy.shape[:-1]) + (features,), dtype)
    gemm(ctx, dtype, dyd, wd, dx, m=rows, n=features, k=outputs, sam=outputs, sak=1, ldb=features, ldc=features)
    return finish(ctx, dx, (dy, w))


def linear_grad_weight(dy: Any, x: Any) -> Any:
    """dy.T @ x over every leading dimension (dy read transposed through the A strides)."""
    ctx, dtype, (dyd, xd) = start(dy, x)
    rows, outputs, features = math.prod(dy.shape[:-1]), dy.shape[-1], x.shape[-1]
    dw = ctx.empty((outputs, features), dtype)
    gemm(ctx, dtype, dyd, xd, dw, m=outputs, n=features, k=rows, sam=1, sak=outputs, ldb=features, ldc=features)
    return finish(ctx, dw, (dy, x))


def linear_grad_bias(dy: Any) -> Any:
    """dy summed over every leading dimension."""
    ctx, dtype, (dyd,) = start(dy)
    return finish(ctx, sum02(ctx, dtype, dyd, math.prod(dy.shape[:-1]), dy.shape[-1], 1), (dy,))


def kernel(call: Any) -> str:
    ctx = context()
    if call.op == "linear_grad_bias":
        return f"sum02: one work-item per feature, on {ctx.describe()}"
    prefix = "swap01 (weight transposed, kept for frozen weights) + " if call.op == "linear" else ""
    return prefix + gemm_kernel_name(ctx)
