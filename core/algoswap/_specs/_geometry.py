"""Shape arithmetic shared by several op families."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from .._spec import Shape
from ._convert import _is_int, bounded, expecting

Pair = tuple[int, int]
Padding = tuple[Pair, Pair]
NO_PADDING: Padding = ((0, 0), (0, 0))
MAX_RANK = 64  # numpy 2's NPY_MAXDIMS: the most dimensions an array of the reference backend has (torch has more)
ANY_RANK = tuple(range(1, MAX_RANK + 1))  # ops that take arrays of any rank but 0-D


def shape_attr(rank: int) -> Callable[[Any], tuple[int, ...]]:
    """An attribute holding a shape of `rank` sizes (e.g. input_size of a gradient op; a batch may be 0)."""
    what = f"a shape of {rank} ints >= 0"

    @expecting(what)
    def convert(value: Any) -> tuple[int, ...]:
        if not isinstance(value, (tuple, list)) or len(value) != rank:
            raise ValueError(what)
        if not all(_is_int(v) and v >= 0 for v in value):
            raise ValueError(what)
        bounded(value, what)
        return tuple(int(v) for v in value)

    return convert


def pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size: the last window must start inside the input or its left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def conv_output_size(size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int) -> int:
    """A convolution's output size along one axis (PyTorch's), < 1 where the dilated kernel does not fit."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


@dataclass(frozen=True)
class ConvGeometry:
    """The sizes of one 2-D convolution: NCHW ``input``, OIHW ``weight`` (O, C/groups, KH, KW) and
    ``output``, with explicit ``padding`` ((top, bottom), (left, right)).

    Made once when a call of the conv2d family is bound (``OpCall.geometry``; for the gradient ops,
    the forward convolution's), and by ``conv_geometry`` from an implementation's own arguments,
    which gives an equal geometry.
    """

    input: Shape
    weight: Shape
    output: Shape
    stride: Pair
    padding: Padding
    dilation: Pair
    groups: int
    padding_mode: str

    @property
    def padded(self) -> Shape:
        """The input's shape with its padding added."""
        (top, bottom), (left, right) = self.padding
        n, c, h, w = self.input
        return (n, c, h + top + bottom, w + left + right)

    @property
    def is_padded(self) -> bool:
        return self.padding != NO_PADDING

    def padded_first(self) -> ConvGeometry:
        """The same convolution over its input padded beforehand (how a library that pads only with
        zeros runs the other padding modes): the padded input, no padding."""
        return replace(self, input=self.padded, padding=NO_PADDING, padding_mode="zeros")


def conv_geometry(input_shape: Sequence[int], weight_shape: Sequence[int], *, stride: Sequence[int] = (1, 1),
                  padding: Sequence[Sequence[int]] = NO_PADDING, dilation: Sequence[int] = (1, 1), groups: int = 1,
                  padding_mode: str = "zeros") -> ConvGeometry:
    """The geometry of a 2-D convolution from the input and weight shapes and the conv2d family's
    canonical attributes (what implementations receive: ``padding`` explicit). It checks nothing:
    ``OpSpec.bind`` has checked the call (an output size < 1 means the kernel does not fit)."""
    (top, bottom), (left, right) = padding
    pads = ((int(top), int(bottom)), (int(left), int(right)))
    strides, dilations = (int(stride[0]), int(stride[1])), (int(dilation[0]), int(dilation[1]))
    x, w = tuple(map(int, input_shape)), tuple(map(int, weight_shape))
    height = conv_output_size(x[2], w[2], strides[0], *pads[0], dilations[0])
    width = conv_output_size(x[3], w[3], strides[1], *pads[1], dilations[1])
    return ConvGeometry(x, w, (x[0], w[0], height, width), strides, pads, dilations, int(groups), padding_mode)
