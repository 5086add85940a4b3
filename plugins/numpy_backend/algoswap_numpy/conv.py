"""Reference 2-D convolution kernels (cross-correlation, NCHW) and their gradients."""

from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from algoswap import FUSED_ACTIVATIONS, conv_geometry

from . import activation as activations
from ._padding import PadHW, pad_hw, unpad_hw_grad

Pair = tuple[int, int]


def _span(start: int, count: int, step: int) -> slice:
    """Slice picking `count` elements from `start` every `step`."""
    return slice(start, start + step * (count - 1) + 1, step)


def _tap(a: np.ndarray, i: int, j: int, out_hw: Pair, stride: Pair, dilation: Pair) -> np.ndarray:
    """Strided view of the input pixels that kernel tap (i, j) meets, shape (..., Ho, Wo)."""
    rows = _span(i * dilation[0], out_hw[0], stride[0])
    cols = _span(j * dilation[1], out_hw[1], stride[1])
    return a[..., rows, cols]


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        y += b.reshape(-1, 1, 1).astype(y.dtype, copy=False)
    return y


def conv2d_direct(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair,
                  padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """Direct convolution: accumulate one grouped matrix product per kernel tap."""
    xp = pad_hw(x, padding, padding_mode)
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    ho, wo = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                           padding_mode=padding_mode).output[2:]
    xg = xp.reshape(n, groups, cg, hp, wp)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    y = np.zeros((n, groups, o // groups, ho * wo), dtype=x.dtype)
    for i, j in np.ndindex(kh, kw):
        patch = _tap(xg, i, j, (ho, wo), stride, dilation).reshape(n, groups, cg, ho * wo)
        y += np.ascontiguousarray(wg[..., i, j]) @ patch
    return _add_bias(y.reshape(n, o, ho, wo), b)


def fused(conv: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """conv2d_fused on one conv2d algorithm: the residual add (in place) and the activation follow,
    the activation by this backend's function of the op it stands for (algoswap.FUSED_ACTIVATIONS)."""

    def conv2d_fused(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None, *,
                     activation: str, **attrs: Any) -> np.ndarray:
        y = conv(x, w, b, **attrs)
        if residual is not None:
            y += residual
        return activated(y, activation)

    conv2d_fused.__name__ = f"{conv.__name__}_fused"
    return conv2d_fused


def activated(y: np.ndarray, activation: str) -> np.ndarray:
    """A fused twin's ``activation`` ("none" or a name of algoswap.FUSED_ACTIVATIONS) applied to ``y`` by
    this backend's function of the op it stands for."""
    if activation == "none":
        return y
    op, op_attrs = FUSED_ACTIVATIONS[activation]
    out: np.ndarray = getattr(activations, op)(y, **op_attrs)
    return out


def _im2col(xp: np.ndarray, kernel_hw: Pair, stride: Pair, dilation: Pair) -> np.ndarray:
    """Patch view of shape (N, C, KH, KW, Ho, Wo) of a padded input."""
    (kh, kw), (sh, sw), (dh, dw) = kernel_hw, stride, dilation
    span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    win = sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    return win.transpose(0, 1, 4, 5, 2, 3)


def conv2d_smm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair,
               padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """im2col lowering followed by one batched matrix product per group."""
    xp = pad_hw(x, padding, padding_mode)
    n = xp.shape[0]
    o, cg, kh, kw = w.shape
    cols = _im2col(xp, (kh, kw), stride, dilation)
    ho, wo = cols.shape[-2:]
    cols = cols.reshape(n, groups, cg * kh * kw, ho * wo)
    y = w.reshape(groups, o // groups, cg * kh * kw) @ cols
    return _add_bias(y.reshape(n, o, ho, wo), b)


def winograd_applies(kernel_hw: Pair, stride: Pair, dilation: Pair) -> bool | str:
    """True if Winograd F(2x2,3x3) can run these attributes, else the reason it cannot."""
    if tuple(kernel_hw) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1):
        return True
    return ("winograd F(2x2,3x3) needs a 3x3 kernel, stride 1 and dilation 1; got kernel "
            f"{tuple(kernel_hw)}, stride {tuple(stride)}, dilation {tuple(dilation)}")


def _input_transform_1d(x: np.ndarray, axis: int, tiles: int) -> list[np.ndarray]:
    """Apply B^T of F(2,3) along `axis` to overlapping width-4 tiles placed every 2."""
    def rows(k: int) -> np.ndarray:
        index = [slice(None)] * x.ndim
        index[axis] = _span(k, tiles, 2)
        return x[tuple(index)]
    d0, d1, d2, d3 = (rows(k) for k in range(4))
    return [d0 - d2, d1 + d2, d2 - d1, d1 - d3]


def _output_transform_1d(m: np.ndarray, axis: int) -> np.ndarray:
    """Apply A^T of F(2,3) along `axis` (length 4 -> 2)."""
    m = np.moveaxis(m, axis, 0)
    out = np.stack([m[0] + m[1] + m[2], m[1] - m[2] - m[3]])
    return np.moveaxis(out, 0, axis)


def _winograd_kernel(w: np.ndarray, groups: int) -> np.ndarray:
    """Transformed kernel G g G^T laid out as (4, 4, groups, O/groups, C/groups)."""
    g_mat = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=w.dtype)
    o, cg = w.shape[:2]
    u = g_mat @ w @ g_mat.T
    return np.ascontiguousarray(u.transpose(2, 3, 0, 1)).reshape(4, 4, groups, o // groups, cg)


def conv2d_winograd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair,
                    padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """Winograd F(2x2, 3x3) convolution, vectorised over all 2x2 output tiles."""
    xp = pad_hw(x, padding, padding_mode)
    n, c, hp, wp = xp.shape
    o, cg = w.shape[:2]
    ho, wo = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                           padding_mode=padding_mode).output[2:]
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    # An odd output size needs one extra zero row/column to complete the last tile.
    xp = np.pad(xp, ((0, 0), (0, 0), (0, 2 * th + 2 - hp), (0, 2 * tw + 2 - wp)))
    v = np.stack([_input_transform_1d(r, 3, tw) for r in _input_transform_1d(xp, 2, th)])
    v = v.reshape(4, 4, n, groups, cg, th * tw).transpose(0, 1, 3, 4, 2, 5)
    v = v.reshape(4, 4, groups, cg, n * th * tw)
    m = _winograd_kernel(w, groups) @ v
    y = _output_transform_1d(_output_transform_1d(m, 0), 1)
    y = y.reshape(2, 2, o, n, th, tw).transpose(3, 2, 4, 0, 5, 1).reshape(n, o, 2 * th, 2 * tw)
    return _add_bias(np.ascontiguousarray(y[:, :, :ho, :wo]), b)


def _dilate_kernel(w: np.ndarray, dilation: Pair) -> np.ndarray:
    """Insert zeros between kernel taps so dilation becomes an ordinary kernel."""
    o, cg, kh, kw = w.shape
    dh, dw = dilation
    out = np.zeros((o, cg, dh * (kh - 1) + 1, dw * (kw - 1) + 1), dtype=w.dtype)
    out[:, :, ::dh, ::dw] = w
    return out


def conv2d_fft(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Pair,
               padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """FFT convolution (computed in float64, since FFT round-off exceeds direct summation)."""
    xp = pad_hw(x, padding, padding_mode).astype(np.float64, copy=False)
    n, c, hp, wp = xp.shape
    o, cg = w.shape[:2]
    wd = _dilate_kernel(w.astype(np.float64, copy=False), dilation)
    kh, kw = wd.shape[2:]
    ho, wo = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                           padding_mode=padding_mode).output[2:]
    # A circular convolution of size (hp, wp) with the flipped kernel is alias-free at
    # every valid output position, so no extra FFT padding is needed.
    wf = wp // 2 + 1
    fx = np.fft.rfft2(xp).reshape(n, groups, cg, hp, wf)
    fw = np.fft.rfft2(wd[..., ::-1, ::-1], s=(hp, wp)).reshape(groups, o // groups, cg, hp, wf)
    fx = np.ascontiguousarray(fx.transpose(3, 4, 1, 0, 2))
    fw = np.ascontiguousarray(fw.transpose(3, 4, 0, 2, 1))
    fy = (fx @ fw).transpose(3, 2, 4, 0, 1).reshape(n, o, hp, wf)
    full = np.fft.irfft2(fy, s=(hp, wp))
    y = full[:, :, _span(kh - 1, ho, stride[0]), _span(kw - 1, wo, stride[1])]
    return _add_bias(y.astype(x.dtype), b)


def conv2d_grad_input(dy: np.ndarray, w: np.ndarray, *, input_size: tuple[int, ...], stride: Pair,
                      padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """Gradient of conv2d w.r.t. its input, padding adjoint included."""
    n, c, h, wid = input_size
    hp, wp = conv_geometry(input_size, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                           padding_mode=padding_mode).padded[2:]
    o, cg, kh, kw = w.shape
    ho, wo = dy.shape[2:]
    dyg = dy.reshape(n, groups, o // groups, ho * wo)
    wt = w.reshape(groups, o // groups, cg, kh, kw).transpose(0, 2, 1, 3, 4)
    dxp = np.zeros((n, c, hp, wp), dtype=dy.dtype)
    for i, j in np.ndindex(kh, kw):
        contrib = (np.ascontiguousarray(wt[..., i, j]) @ dyg).reshape(n, c, ho, wo)
        _tap(dxp, i, j, (ho, wo), stride, dilation)[...] += contrib
    return unpad_hw_grad(dxp, (h, wid), padding, padding_mode)


def conv2d_grad_weight(dy: np.ndarray, x: np.ndarray, *, weight_size: tuple[int, ...], stride: Pair,
                       padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> np.ndarray:
    """Gradient of conv2d w.r.t. its weight."""
    xp = pad_hw(x, padding, padding_mode)
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = weight_size
    ho, wo = dy.shape[2:]
    dyt = dy.reshape(n, groups, o // groups, ho * wo).transpose(1, 2, 0, 3)
    dyt = dyt.reshape(groups, o // groups, n * ho * wo)
    xg = xp.reshape(n, groups, cg, hp, wp)
    dw = np.empty((o, cg, kh, kw), dtype=dy.dtype)
    for i, j in np.ndindex(kh, kw):
        patch = _tap(xg, i, j, (ho, wo), stride, dilation).transpose(1, 0, 3, 4, 2)
        dw[:, :, i, j] = (dyt @ patch.reshape(groups, n * ho * wo, cg)).reshape(o, cg)
    return dw


def conv2d_grad_bias(dy: np.ndarray) -> np.ndarray:
    """Gradient of conv2d w.r.t. its bias: sum over batch and space."""
    return dy.sum(axis=(0, 2, 3))
