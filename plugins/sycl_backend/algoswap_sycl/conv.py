"""conv2d (direct and im2col + matrix product) and its gradients on OpenCL C kernels, NCHW / OIHW.

Every padding form of the spec is served: the input is first padded on the device (zeros, reflect,
replicate, circular), and the input gradient is folded back through the adjoint of that padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from algoswap import ConvGeometry, LRUCache, conv_geometry, declare_cache

from ._device import Context, Long, SyclArray
from ._launch import TM, VN, ceil_div, finish, gemm, gemm_kernel_name, optional, start, sum02, supports_dtype_and_size, swap01

Pair = tuple[int, int]
PadHW = tuple[Pair, Pair]
MODES = {"zeros": 0, "reflect": 1, "replicate": 2, "circular": 3}


@dataclass(frozen=True)
class Geometry:
    """The sizes the kernels take, of one convolution's ``algoswap.ConvGeometry``: input, weight, padded
    input and output."""

    n: int
    c: int
    h: int
    w: int
    o: int
    cg: int
    kh: int
    kw: int
    groups: int
    stride: Pair
    dilation: Pair
    padding: PadHW
    mode: int
    hp: int
    wp: int
    oh: int
    ow: int

    @classmethod
    def of(cls, g: ConvGeometry) -> "Geometry":
        (n, c, h, w), (o, cg, kh, kw) = g.input, g.weight
        (_, _, hp, wp), (_, _, oh, ow) = g.padded, g.output
        return cls(n, c, h, w, o, cg, kh, kw, g.groups, g.stride, g.dilation, g.padding, MODES[g.padding_mode],
                   hp, wp, oh, ow)

    @property
    def og(self) -> int:
        return self.o // self.groups

    @property
    def taps(self) -> int:
        """Rows of the im2col matrix per group: cg * kh * kw."""
        return self.cg * self.kh * self.kw

    @property
    def pixels(self) -> int:
        return self.oh * self.ow

    @property
    def unpadded(self) -> bool:
        return self.padding == ((0, 0), (0, 0))

    def window(self) -> list[int]:
        return [self.kh, self.kw, self.oh, self.ow, *self.stride, *self.dilation]


def _pad(ctx: Context, dtype: np.dtype, x: SyclArray, g: Geometry, width: int) -> SyclArray:
    """The input padded to (hp, width) columns: the spec's padding, then zeros up to ``width``."""
    if g.unpadded and width == g.w:
        return x
    xp = ctx.empty((g.n, g.c, g.hp, width), dtype, temporary=True)
    (top, _), (left, _) = g.padding
    ctx.run(dtype, "pad2d", [x, xp, g.h, g.w, g.hp, g.wp, g.hp, width, top, left, g.mode, 1, 1, 1, 1], [g.n * g.c, g.hp])
    return xp


def _geometry(x: Any, w_shape: tuple[int, ...], stride: Pair, padding: PadHW, dilation: Pair, groups: int,
              padding_mode: str) -> Geometry:
    return Geometry.of(conv_geometry(x, w_shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                                     padding_mode=padding_mode))


SMM_CHUNK_BYTES = 8 * 2**20  # im2col matrices per product: images are taken in chunks of about this size
PANEL, IM2COL_ROWS = 32, 8  # columns per panel of the im2col matrix, rows per work-item (kernels/layout.cl: im2col)


def panels(g: Geometry) -> int:
    return ceil_div(g.pixels, PANEL)


def smm_chunk(g: Geometry, itemsize: int) -> int:
    """Images per im2col + product: about SMM_CHUNK_BYTES of im2col matrix, so that it is still in cache
    when the product reads it."""
    return max(1, min(g.n, SMM_CHUNK_BYTES // (g.groups * g.taps * panels(g) * PANEL * itemsize)))


def conv2d_smm(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
               padding_mode: str) -> Any:
    """im2col of a chunk of images (in panels of 32 columns, as the product reads them), then one tiled
    matrix product per image and group, writing the output in place, with the bias in its epilogue."""
    ctx, dtype, (xd, wd) = start(x, w)
    bd = optional(ctx, b)
    g = _geometry(x.shape, w.shape, stride, padding, dilation, groups, padding_mode)
    y = ctx.empty((g.n, g.o, g.oh, g.ow), dtype)
    kwargs = dict(m=g.og, n=g.pixels, k=g.taps, sam=g.taps, sak=1, ldc=g.pixels, groups=g.groups,
                  a_g=g.og * g.taps, c_n=g.o * g.pixels, c_g=g.og * g.pixels, bias=bd, bias_mode=0 if bd is None else 1)
    if g.kh == g.kw == 1 and g.stride == (1, 1) and g.unpadded:  # a 1x1 convolution: the input is the im2col matrix
        gemm(ctx, dtype, wd, xd, y, ldb=g.pixels, batches=g.n, b_n=g.c * g.pixels, b_g=g.taps * g.pixels,
             **kwargs)  # type: ignore[arg-type]
        return finish(ctx, y, (x, w, b))
    chunk = smm_chunk(g, dtype.itemsize)
    matrix = g.taps * panels(g) * PANEL  # elements of one image's (and group's) im2col matrix
    xp = _pad(ctx, dtype, xd, g, g.wp)
    col = ctx.empty((chunk * g.groups, matrix), dtype, temporary=True)
    for first in range(0, g.n, chunk):
        count = min(chunk, g.n - first)
        ctx.run(dtype, "im2col", [xp, col, first, g.c, g.hp, g.wp, g.cg, *g.window(), g.groups],
                [count * g.groups, panels(g), ceil_div(g.taps, IM2COL_ROWS)])
        gemm(ctx, dtype, wd, col, y, ldb=PANEL, panel=PANEL, b_padded=True, batches=count, b_n=g.groups * matrix,
             b_g=matrix, c_off=first * g.o * g.pixels, **kwargs)  # type: ignore[arg-type]
    return finish(ctx, y, (x, w, b))


def _phase_count(taps: int, stride: int, dilation: int) -> int:
    """How many phases of a stride the taps read: the first few (a 1x1 kernel: one), else all."""
    used = sorted({t * dilation % stride for t in range(taps)})
    return len(used) if used == list(range(len(used))) else stride


def _phases(ctx: Context, dtype: np.dtype, x: SyclArray, g: Geometry) -> tuple[SyclArray, int, int, int, int]:
    """(xs, nph, npw, hq, wq): the input padded and split into the nph x npw phases of the stride it reads, hq
    x wq each, with slack past the end for the direct kernel's vector loads (see kernels/direct.cl)."""
    (sh, sw), (dh, dw) = g.stride, g.dilation
    nph, npw = _phase_count(g.kh, sh, dh), _phase_count(g.kw, sw, dw)
    hq, wq = ceil_div(g.hp, sh), ceil_div(g.wp, sw)
    size = g.n * g.c * nph * npw * hq * wq
    xs = ctx.empty((size + wq + 2 * VN,), dtype, temporary=True)
    xs.host_view()[size:] = 0  # read into dropped columns only: zeros, never stale memory (denormals are slow)
    (top, _), (left, _) = g.padding
    ctx.run(dtype, "pad2d", [x, xs, g.h, g.w, g.hp, g.wp, hq, wq, top, left, g.mode, sh, sw, nph, npw],
            [g.n * g.c * nph * npw, hq])
    return xs, nph, npw, hq, wq


OFFSETS = declare_cache("sycl_tap_offsets", 256,
                        "SYCL conv2d: the tap offset table of each direct-convolution geometry (a small device array)")
_offsets: LRUCache[SyclArray] = LRUCache(OFFSETS)


def _tap_offsets(ctx: Context, g: Geometry, npw: int, channel: int, hq: int, wq: int) -> SyclArray:
    """Where each row k = (c, kh, kw) of the product's B starts in a group's phases (kernels/direct.cl)."""
    key = (ctx.filter_string, g.cg, g.kh, g.kw, g.stride, g.dilation, npw, channel, hq, wq)
    found = _offsets.get(key)
    if found is None:
        (sh, sw), (dh, dw) = g.stride, g.dilation
        kh, kw = np.divmod(np.arange(g.kh * g.kw), g.kw)
        (di, ph), (dj, pw) = np.divmod(kh * dh, sh), np.divmod(kw * dw, sw)
        taps = ((ph * npw + pw) * hq + di) * wq + dj
        channels = np.arange(g.cg)[:, None] * channel
        found = _offsets.put(key, ctx.upload((channels + taps).astype(np.int32).ravel()))
    return found


def conv2d_direct(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
                  padding_mode: str) -> Any:
    """Direct convolution: the tiled matrix product reading the padded, phase-split input in place (no im2col
    matrix); each work-item accumulates 8 output channels x 32 columns (kernels/direct.cl)."""
    ctx, dtype, (xd, wd) = start(x, w)
    bd = optional(ctx, b)
    g = _geometry(x.shape, w.shape, stride, padding, dilation, groups, padding_mode)
    xs, nph, npw, hq, wq = _phases(ctx, dtype, xd, g)
    channel = nph * npw * hq * wq
    y = ctx.empty((g.n, g.o, g.oh, g.ow), dtype)
    ctx.run(dtype, "conv_direct",
            [xs, wd, bd if bd is not None else wd, y, _tap_offsets(ctx, g, npw, channel, hq, wq), g.c, g.cg,
             Long(channel), g.o, g.og, g.oh, g.ow, wq, g.taps, g.groups,
             int(bd is not None)],
            [g.n * g.groups, ceil_div(g.oh * wq, VN), ceil_div(g.og, TM)])
    return finish(ctx, y, (x, w, b))


def conv2d_grad_input(dy: Any, w: Any, *, input_size: tuple[int, ...], stride: Pair, padding: PadHW,
                      dilation: Pair, groups: int, padding_mode: str) -> Any:
    """W^T @ dy per group (the tiled matrix product), col2im onto the padded grid, then the padding's adjoint."""
    ctx, dtype, (dyd, wd) = start(dy, w)
    g = _geometry(input_size, w.shape, stride, padding, dilation, groups, padding_mode)
    dcol = ctx.empty((g.n * g.groups, g.taps, g.pixels), dtype, temporary=True)
    gemm(ctx, dtype, wd, dyd, dcol, m=g.taps, n=g.pixels, k=g.og, sam=1, sak=g.taps, ldb=g.pixels, ldc=g.pixels,
         groups=g.groups, batches=g.n, a_g=g.og * g.taps, b_n=g.o * g.pixels, b_g=g.og * g.pixels,
         c_n=g.groups * g.taps * g.pixels, c_g=g.taps * g.pixels)
    dxp = ctx.empty((g.n, g.c, g.hp, g.wp), dtype, temporary=not g.unpadded)
    ctx.run(dtype, "col2im", [dcol, dxp, g.c, g.hp, g.wp, g.cg, *g.window(), g.groups], [g.n * g.c, g.hp, g.wp])
    return finish(ctx, _unpad(ctx, dtype, dxp, g), (dy, w))


def _unpad(ctx: Context, dtype: np.dtype, dxp: SyclArray, g: Geometry) -> SyclArray:
    """The gradient w.r.t. the unpadded input: each padded cell's gradient summed onto its source."""
    if g.unpadded:
        return dxp
    (top, _), (left, _) = g.padding
    rows = ctx.empty((g.n, g.c, g.h, g.wp), dtype, temporary=True)
    ctx.run(dtype, "fold_axis", [dxp, rows, g.h, g.hp, g.wp, top, g.mode], [g.n * g.c, g.h, g.wp])
    dx = ctx.empty((g.n, g.c, g.h, g.w), dtype)
    ctx.run(dtype, "fold_axis", [rows, dx, g.w, g.wp, 1, left, g.mode], [g.n * g.c * g.h, g.w, 1])
    return dx


def conv2d_grad_weight(dy: Any, x: Any, *, weight_size: tuple[int, ...], stride: Pair, padding: PadHW,
                       dilation: Pair, groups: int, padding_mode: str) -> Any:
    """dy (batch moved behind the channels) @ transposed im2col, per group, summing over the batch in K."""
    ctx, dtype, (dyd, xd) = start(dy, x)
    g = _geometry(x.shape, tuple(weight_size), stride, padding, dilation, groups, padding_mode)
    xp = _pad(ctx, dtype, xd, g, g.wp)
    rows = g.n * g.pixels
    col_t = ctx.empty((g.groups, rows, g.taps), dtype, temporary=True)
    ctx.run(dtype, "im2col_t", [xp, col_t, g.n, g.c, g.hp, g.wp, g.cg, *g.window()], [g.groups, rows, g.taps])
    dy_t = dyd if g.n == 1 else swap01(ctx, dtype, dyd, g.n, g.o, g.pixels)
    dw = ctx.empty(tuple(weight_size), dtype)
    gemm(ctx, dtype, dy_t, col_t, dw, m=g.og, n=g.taps, k=rows, sam=rows, sak=1, ldb=g.taps, ldc=g.taps,
         groups=g.groups, a_g=g.og * rows, b_g=rows * g.taps, c_g=g.og * g.taps)
    return finish(ctx, dw, (dy, x))


def conv2d_grad_bias(dy: Any) -> Any:
    """dy summed over the batch and the pixels, one work-item per channel."""
    ctx, dtype, (dyd,) = start(dy)
    n, o, h, w = dy.shape
    return finish(ctx, sum02(ctx, dtype, dyd, n, o, h * w), (dy,))


def kernel(call: Any) -> str:
    from ._device import context

    ctx = context()
    if call.op == "conv2d_grad_bias":
        return f"sum02: one work-item per channel, on {ctx.describe()}"
    a = call.attrs
    padded = a["padding"] != ((0, 0), (0, 0))
    pad = "pad2d + " if padded else ""
    if call.op == "conv2d_grad_input":
        return f"{gemm_kernel_name(ctx)} + col2im{' + fold_axis' if padded else ''}"
    if call.op == "conv2d_grad_weight":
        return f"{pad}im2col_t + swap01 + {gemm_kernel_name(ctx)}"
    if call.shape("weight")[2:] == (1, 1) and a["stride"] == (1, 1) and not padded:
        return f"{gemm_kernel_name(ctx)} (a 1x1 convolution: the input is the im2col matrix)"
    g = Geometry.of(call.geometry)
    return (f"{pad}im2col + {gemm_kernel_name(ctx)} (im2col in panels of {PANEL} columns,"
            f" {smm_chunk(g, 4 if call.dtype == 'float32' else 8)} image(s) at a time)")


def kernel_direct(call: Any) -> str:
    from ._device import context

    return (f"pad2d (split into the stride's phases) + conv_direct: {TM}x{VN} register tile per work-item of the"
            f" matrix product, B read from the input in place, on {context().describe()}")


def supports_fused(call: Any) -> bool | str:
    """The epilogue applies relu only: a call with another activation runs unfused (its members one by one)."""
    if call.attrs["activation"] not in ("none", "relu"):
        return f"activation {call.attrs['activation']!r}: the epilogue kernel fuses relu only"
    return supports_dtype_and_size(call)


def _fused(conv: Any) -> Any:
    """conv2d_fused on ``conv``: the convolution (bias in its store), then the residual and relu in one
    pass over its output, on the device."""
    def conv2d_fused(x: Any, w: Any, b: Any, residual: Any, *, activation: str, **attrs: Any) -> Any:
        ctx, dtype, (xd,) = start(x)
        y = conv(xd, w, b, **attrs)  # stays on the device: its input is a SyclArray
        relu = activation == "relu"
        if residual is not None or relu:
            rd = y if residual is None else ctx.device(residual)
            ctx.run(dtype, "epilogue", [y, rd, int(residual is not None), int(relu)], [y.size])
        return finish(ctx, y, (x, w, b, residual))

    conv2d_fused.__name__ = conv2d_fused.__qualname__ = f"{conv.__name__}_fused"
    return conv2d_fused


conv2d_smm_fused = _fused(conv2d_smm)
conv2d_direct_fused = _fused(conv2d_direct)


def _epilogue_label(call: Any) -> str:
    parts = (["+ residual"] if call.shape("residual") is not None else []) + (["relu"] if call.attrs["activation"] == "relu" else [])
    return f", then epilogue ({', '.join(parts)}) in one pass" if parts else ""


def kernel_fused(call: Any) -> str:
    return kernel(call) + _epilogue_label(call)


def kernel_direct_fused(call: Any) -> str:
    return kernel_direct(call) + _epilogue_label(call)
