"""Reference 2-D pooling kernels (NCHW) and their gradients."""

import numpy as np

from algoswap import pool_output_size

Pair = tuple[int, int]


def _span(start: int, count: int, step: int) -> slice:
    return slice(start, start + step * (count - 1) + 1, step)


def _max_windows(x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair,
                 dilation: Pair, ceil_mode: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window maxima, the winning tap per window, and the -inf padded input."""
    h, w = x.shape[2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    ho = pool_output_size(h, kh, sh, ph, dh, ceil_mode)
    wo = pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    # Pad far enough for every window; the -inf beyond the input also clips ceil-mode windows.
    extra_h = max((ho - 1) * sh + dh * (kh - 1) + 1 - h - ph, 0)
    extra_w = max((wo - 1) * sw + dw * (kw - 1) + 1 - w - pw, 0)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, extra_h), (pw, extra_w)), constant_values=-np.inf)
    best = xp[..., _span(0, ho, sh), _span(0, wo, sw)].copy()
    arg = np.zeros(best.shape, dtype=np.intp)
    for tap, (i, j) in enumerate(np.ndindex(kh, kw)):
        if tap == 0:
            continue
        val = xp[..., _span(i * dh, ho, sh), _span(j * dw, wo, sw)]
        # Strict '>' keeps the first maximum; NaN always wins, as in PyTorch.
        better = (val > best) | np.isnan(val)
        np.copyto(best, val, where=better)
        arg[better] = tap
    return best, arg, xp


def maxpool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair,
              dilation: Pair, ceil_mode: bool) -> np.ndarray:
    """2-D max pooling with -inf padding."""
    return _max_windows(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def maxpool2d_grad(dy: np.ndarray, x: np.ndarray, *, kernel_size: Pair, stride: Pair,
                   padding: Pair, dilation: Pair, ceil_mode: bool) -> np.ndarray:
    """Gradient of max pooling, routed to the first maximum of each window."""
    _, arg, xp = _max_windows(x, kernel_size, stride, padding, dilation, ceil_mode)
    n, c, h, w = x.shape
    hp, wp = xp.shape[2:]
    ho, wo = arg.shape[2:]
    kw = kernel_size[1]
    rows = (np.arange(ho) * stride[0])[:, None] + (arg // kw) * dilation[0]
    cols = np.arange(wo) * stride[1] + (arg % kw) * dilation[1]
    planes = (np.arange(n * c) * (hp * wp)).reshape(n, c, 1, 1)
    flat = (planes + rows * wp + cols).ravel()
    dxp = np.bincount(flat, weights=dy.ravel(), minlength=n * c * hp * wp)
    dxp = dxp.reshape(n, c, hp, wp)[..., padding[0]:padding[0] + h, padding[1]:padding[1] + w]
    return np.ascontiguousarray(dxp, dtype=dy.dtype)


def _window_matrix(start: np.ndarray, end: np.ndarray, in_size: int) -> np.ndarray:
    """0/1 matrix (out, in) with ones on [start, end) of each row."""
    cols = np.arange(in_size)
    return ((cols >= start[:, None]) & (cols < end[:, None])).astype(np.float64)


def _avg_axis(in_size: int, kernel: int, stride: int, pad: int, ceil_mode: bool,
              count_include_pad: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-axis window matrix (out, in) and the per-axis divisor factor (out,)."""
    out = pool_output_size(in_size, kernel, stride, pad, 1, ceil_mode)
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, in_size + pad)
    pool_size = end - start
    start, end = np.maximum(start, 0), np.minimum(end, in_size)
    divisor = pool_size if count_include_pad else end - start
    return _window_matrix(start, end, in_size), divisor


def _avg_operators(input_hw: Pair, kernel_size: Pair, stride: Pair, padding: Pair,
                   ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
                   dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Row and column averaging matrices whose product y = A_h x A_w^T is avg pooling."""
    ops, divisors = [], []
    for size, k, s, p in zip(input_hw, kernel_size, stride, padding):
        mat, div = _avg_axis(size, k, s, p, ceil_mode, count_include_pad)
        ops.append(mat)
        divisors.append(div)
    if divisor_override is not None:
        ops[0] = ops[0] / divisor_override
    else:
        ops = [mat / div[:, None] for mat, div in zip(ops, divisors)]
    return ops[0].astype(dtype), ops[1].astype(dtype)


def avgpool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    """2-D average pooling as two separable matrix products."""
    a_h, a_w = _avg_operators(x.shape[2:], kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, x.dtype)
    return a_h @ x @ a_w.T


def avgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...], kernel_size: Pair,
                   stride: Pair, padding: Pair, ceil_mode: bool, count_include_pad: bool,
                   divisor_override: int | None) -> np.ndarray:
    """Gradient of average pooling (the transposed matrix products)."""
    a_h, a_w = _avg_operators(tuple(input_size[2:]), kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, dy.dtype)
    return a_h.T @ dy @ a_w


def _adaptive_matrix(in_size: int, out_size: int, dtype: np.dtype) -> np.ndarray:
    """Row-normalised window matrix (out, in) of PyTorch's adaptive pooling windows."""
    i = np.arange(out_size)
    start = (i * in_size) // out_size
    end = -((-(i + 1) * in_size) // out_size)
    return (_window_matrix(start, end, in_size) / (end - start)[:, None]).astype(dtype)


def adaptiveavgpool2d(x: np.ndarray, *, output_size: Pair) -> np.ndarray:
    """Adaptive 2-D average pooling to output_size."""
    a_h = _adaptive_matrix(x.shape[2], output_size[0], x.dtype)
    a_w = _adaptive_matrix(x.shape[3], output_size[1], x.dtype)
    return a_h @ x @ a_w.T


def adaptiveavgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...]) -> np.ndarray:
    """Gradient of adaptive average pooling."""
    a_h = _adaptive_matrix(input_size[2], dy.shape[2], dy.dtype)
    a_w = _adaptive_matrix(input_size[3], dy.shape[3], dy.dtype)
    return a_h.T @ dy @ a_w
