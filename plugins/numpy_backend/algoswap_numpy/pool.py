"""Reference 2-D pooling kernels (NCHW) and their gradients."""

import numpy as np

from algoswap import pool_output_size

Pair = tuple[int, int]


def _span(start: int, count: int, step: int) -> slice:
    return slice(start, start + step * (count - 1) + 1, step)


def _padded(x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil_mode: bool,
            fill: float) -> tuple[np.ndarray, int, int]:
    """x padded with ``fill`` far enough for every window (ceil-mode windows past the padding
    included), and the output size (Ho, Wo)."""
    ho, wo = (pool_output_size(size, k, s, p, d, ceil_mode)
              for size, k, s, p, d in zip(x.shape[2:], kernel_size, stride, padding, dilation))
    extra = [max((o - 1) * s + d * (k - 1) + 1 - size - p, 0)
             for o, size, k, s, p, d in zip((ho, wo), x.shape[2:], kernel_size, stride, padding, dilation)]
    widths = ((0, 0), (0, 0), (padding[0], extra[0]), (padding[1], extra[1]))
    return np.pad(x, widths, constant_values=fill), ho, wo


def _max_windows(x: np.ndarray, kernel_size: Pair, stride: Pair, padding: Pair,
                 dilation: Pair, ceil_mode: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window maxima, the winning tap per window, and the -inf padded input."""
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, stride, dilation
    xp, ho, wo = _padded(x, kernel_size, stride, padding, dilation, ceil_mode, -np.inf)
    best = xp[..., _span(0, ho, sh), _span(0, wo, sw)].copy()
    arg = np.zeros(best.shape, dtype=np.intp)
    for tap, (i, j) in enumerate(np.ndindex(kh, kw)):
        if tap == 0:
            continue
        val = xp[..., _span(i * dh, ho, sh), _span(j * dw, wo, sw)]
        # Strict '>' keeps the first maximum; a NaN always wins (the last one), as in PyTorch.
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
    """Gradient of max pooling, routed to the first maximum of each window (to its last NaN if it
    holds one, as in PyTorch)."""
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


def _avg_axis(in_size: int, kernel: int, stride: int, pad: int, ceil_mode: bool, count_include_pad: bool) -> np.ndarray:
    """The per-axis divisor factor of each window, as PyTorch counts it."""
    out = pool_output_size(in_size, kernel, stride, pad, 1, ceil_mode)
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, in_size + pad)
    return end - start if count_include_pad else np.minimum(end, in_size) - np.maximum(start, 0)


def _avg_divisor(input_hw: tuple[int, ...], kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
                 count_include_pad: bool, divisor_override: int | None, dtype: np.dtype) -> np.ndarray:
    """The divisor of each output window (Ho, Wo)."""
    div_h, div_w = (_avg_axis(size, k, s, p, ceil_mode, count_include_pad)
                    for size, k, s, p in zip(input_hw, kernel_size, stride, padding))
    divisor = np.full((len(div_h), len(div_w)), divisor_override) if divisor_override is not None else np.outer(div_h, div_w)
    return divisor.astype(dtype)


def _tap_sum(views: list[np.ndarray]) -> np.ndarray:
    total = views[0].copy()
    for view in views[1:]:
        total += view
    return total


def avgpool2d(x: np.ndarray, *, kernel_size: Pair, stride: Pair, padding: Pair, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    """2-D average pooling: the zero-padded input summed tap by tap along rows, then along columns
    (each window sums only its own cells, so a NaN or inf reaches only the windows that hold it),
    divided as PyTorch divides."""
    (kh, kw), (sh, sw) = kernel_size, stride
    xp, ho, wo = _padded(x, kernel_size, stride, padding, (1, 1), ceil_mode, 0.0)
    rows = _tap_sum([xp[..., _span(i, ho, sh), :] for i in range(kh)])
    sums = _tap_sum([rows[..., _span(j, wo, sw)] for j in range(kw)])
    divisor = _avg_divisor(x.shape[2:], kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, x.dtype)
    return np.asarray(sums / divisor, dtype=x.dtype)


def avgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...], kernel_size: Pair,
                   stride: Pair, padding: Pair, ceil_mode: bool, count_include_pad: bool,
                   divisor_override: int | None) -> np.ndarray:
    """Gradient of average pooling: grad / divisor added back onto every tap of its window."""
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    n, c, h, w = input_size
    ho, wo = dy.shape[2:]
    share = dy / _avg_divisor((h, w), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dy.dtype)
    rows = np.zeros((n, c, ho, max(w + pw, (wo - 1) * sw + kw)), dtype=dy.dtype)
    for j in range(kw):
        rows[..., _span(j, wo, sw)] += share
    grad = np.zeros((n, c, max(h + ph, (ho - 1) * sh + kh), rows.shape[3]), dtype=dy.dtype)
    for i in range(kh):
        grad[..., _span(i, ho, sh), :] += rows
    return np.ascontiguousarray(grad[..., ph:ph + h, pw:pw + w])


def _window_sums(x: np.ndarray, start: np.ndarray, end: np.ndarray, axis: int) -> np.ndarray:
    """Sums of x over [start[i], end[i]) along axis (an empty window sums to 0), added tap by tap:
    tap t of every window at once, reading a zero past the input where a window is shorter."""
    size, lengths = x.shape[axis], end - start
    sums = np.zeros_like(x, shape=x.shape[:axis] + (len(start),) + x.shape[axis + 1:])
    padded = None
    for tap in range(int(np.max(lengths, initial=0))):
        if np.all(lengths > tap):
            sums += np.take(x, start + tap, axis=axis)
            continue
        if padded is None:
            padded = np.concatenate([x, np.zeros_like(x, shape=x.shape[:axis] + (1,) + x.shape[axis + 1:])], axis=axis)
        sums += np.take(padded, np.where(lengths > tap, start + tap, size), axis=axis)
    return sums


def _adaptive_windows(in_hw: tuple[int, ...], out_hw: tuple[int, ...]) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """PyTorch's adaptive windows [floor(i * in / out), ceil((i + 1) * in / out)) per axis, and each output's size."""
    windows = []
    for in_size, out_size in zip(in_hw, out_hw):
        i = np.arange(out_size)
        windows.append(((i * in_size) // out_size, -((-(i + 1) * in_size) // out_size)))
    (rows_start, rows_end), (cols_start, cols_end) = windows
    return windows, np.outer(rows_end - rows_start, cols_end - cols_start)


def adaptiveavgpool2d(x: np.ndarray, *, output_size: Pair) -> np.ndarray:
    """Adaptive 2-D average pooling to output_size: window sums along rows, then along columns."""
    ((rows_start, rows_end), (cols_start, cols_end)), count = _adaptive_windows(x.shape[2:], output_size)
    sums = _window_sums(_window_sums(x, rows_start, rows_end, 2), cols_start, cols_end, 3)
    return sums / count.astype(x.dtype)


def adaptiveavgpool2d_grad(dy: np.ndarray, *, input_size: tuple[int, ...]) -> np.ndarray:
    """Gradient of adaptive average pooling: each input cell sums grad / size over the windows that
    hold it (windows move forward, so those are a range [first, last) of them)."""
    in_hw = tuple(input_size[2:])
    windows, count = _adaptive_windows(in_hw, dy.shape[2:])
    grad = dy / count.astype(dy.dtype)
    for axis, size, (start, end) in zip((2, 3), in_hw, windows):
        cells = np.arange(size)
        grad = _window_sums(grad, np.searchsorted(end, cells, side="right"), np.searchsorted(start, cells, side="right"), axis)
    return grad
