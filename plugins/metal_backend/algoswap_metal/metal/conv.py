"""conv2d and conv2d_fused on our kernels (NCHW input, OIHW weight, float32): ``direct`` (kernels/conv.metal: one
thread per output) and ``smm`` (im2col, then the tiled product of kernels/gemm.metal), every padding mode read in
place. The fused twins apply bias, residual and activation in the same kernel's store (gelu excepted: MSL has no
erf, so its chains run unfused)."""

from __future__ import annotations

from typing import Any

from algoswap import conv_geometry

from .._device import MpsArray
from . import _launch
from ._params import ACTIVATIONS, PADDING_MODES

Pair = tuple[int, int]
PadHW = tuple[Pair, Pair]
GROUP = 256  # threads per threadgroup of the one-thread-per-element kernels
SIDE, TILE = 8, 32  # must match kernels/gemm.metal


def _fields(x: MpsArray, w: MpsArray, b: MpsArray | None, residual: MpsArray | None, activation: str, *, stride: Pair,
            padding: PadHW, dilation: Pair, groups: int, padding_mode: str) -> dict[str, int]:
    """ConvParams of one call."""
    g = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                      padding_mode=padding_mode)
    (n, c, h, wd), (o, cg, kh, kw), (_, _, oh, ow) = g.input, g.weight, g.output
    (top, _), (left, _) = g.padding
    return dict(n=n, c=c, h=h, w=wd, o=o, cg=cg, kh=kh, kw=kw, oh=oh, ow=ow, groups=g.groups, sh=g.stride[0],
                sw=g.stride[1], dh=g.dilation[0], dw=g.dilation[1], top=top, left=left, mode=PADDING_MODES[g.padding_mode],
                has_bias=int(b is not None), has_residual=int(residual is not None), activation=ACTIVATIONS[activation])


def conv2d_direct_fused(x: MpsArray, w: MpsArray, b: MpsArray | None, residual: MpsArray | None, *, activation: str,
                        **attrs: Any) -> MpsArray:
    """One thread per output: its taps, then bias, residual and activation."""
    p = _fields(x, w, b, residual, activation, **attrs)
    y = _launch.empty((p["n"], p["o"], p["oh"], p["ow"]))
    _launch.run("conv2d_direct", x.tensor, w.tensor, _launch.tensor(b), _launch.tensor(residual), y,
                _launch.params("ConvParams", **p), threads=[y.numel()], group=[GROUP])
    return MpsArray(y)


def conv2d_smm_fused(x: MpsArray, w: MpsArray, b: MpsArray | None, residual: MpsArray | None, *, activation: str,
                     **attrs: Any) -> MpsArray:
    """im2col of every image and group (none for an unpadded 1x1 convolution of stride 1: the input is its own
    im2col matrix), then one tiled product per image and group writing the output, bias, residual and activation
    in its store."""
    p = _fields(x, w, b, residual, activation, **attrs)
    n, c, o, groups, pixels = p["n"], p["c"], p["o"], p["groups"], p["oh"] * p["ow"]
    rows = p["cg"] * p["kh"] * p["kw"]
    if _is_pointwise(p):
        col, per_image = x.tensor, c * pixels
    else:
        col, per_image = _launch.empty((n * groups, rows, pixels)), groups * rows * pixels
        _launch.run("im2col", x.tensor, col, _launch.params("ConvParams", **p), threads=[pixels, rows, n * groups],
                    group=[32, 8, 1])
    og = o // groups
    y = _launch.empty((n, o, p["oh"], p["ow"]))
    gemm = _launch.params("GemmParams", m=og, n=pixels, k=rows, groups=groups, a_group=og * rows, b_batch=per_image,
                          b_group=rows * pixels, c_batch=o * pixels, c_group=og * pixels, has_bias=p["has_bias"],
                          has_residual=p["has_residual"], activation=p["activation"])
    _launch.run("gemm", w.tensor, col, _launch.tensor(b), _launch.tensor(residual), y, gemm,
                threads=[_launch.ceil_div(pixels, TILE) * SIDE, _launch.ceil_div(og, TILE) * SIDE, n * groups],
                group=[SIDE, SIDE, 1])
    return MpsArray(y)


def _is_pointwise(p: dict[str, int]) -> bool:
    return (p["kh"], p["kw"], p["sh"], p["sw"], p["top"], p["left"], p["oh"], p["ow"]) == (1, 1, 1, 1, 0, 0, p["h"], p["w"])


def conv2d_direct(x: MpsArray, w: MpsArray, b: MpsArray | None, **attrs: Any) -> MpsArray:
    return conv2d_direct_fused(x, w, b, None, activation="none", **attrs)


def conv2d_smm(x: MpsArray, w: MpsArray, b: MpsArray | None, **attrs: Any) -> MpsArray:
    return conv2d_smm_fused(x, w, b, None, activation="none", **attrs)


def supports_fused(call: Any) -> bool | str:
    """The activations the kernels' store applies (kernels/common.metal: activate)."""
    activation = call.attrs["activation"]
    if activation not in ACTIVATIONS:
        return f"activation {activation!r}: the Metal Shading Language has no erf, so the kernels fuse {', '.join(ACTIVATIONS)}"
    return _launch.supports_size(call)

