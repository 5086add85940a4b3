"""swap_backend lowers the ops timm's newer families need onto existing registry ops: 1-D convolutions
(a conv2d over a unit height), resampling (F.interpolate, nn.Upsample), casts that change nothing at the
compute dtype, and addcmul (each case: a small module against PyTorch, explain() naming the ops)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import UnsupportedModelError  # noqa: E402
from lowering_check import Fn, check_lowered  # noqa: E402

NCL = (2, 4, 9)

# ---------------------------------------------------------------------------- 1-D convolutions

CONV1D = [
    ("module", lambda m, x: m.conv(x), 4 * 3),
    ("module pointwise as coat's aggregate", lambda m, x: m.point(x), 4),
    ("module same padding", lambda m, x: m.same(x), 2 * 5),
    ("function on a weight", lambda m, x: F.conv1d(x, m.weight, m.bias, stride=(2,), padding=1, groups=2), 2 * 3),
    ("function on a weight computed in forward", lambda m, x: F.conv1d(x, m.weight * x.shape[0], None, 1, "same", 1, 2), 2 * 3),
]


def _conv_parts() -> dict[str, Any]:
    torch.manual_seed(0)
    return {"conv": nn.Conv1d(4, 6, 3, stride=2, padding=1), "point": nn.Conv1d(4, 1, 1),
            "same": nn.Conv1d(4, 6, 5, padding="same", dilation=2, groups=2, bias=False),
            "weight": nn.Parameter(torch.randn(6, 2, 3)), "bias": nn.Parameter(torch.randn(6))}


@pytest.mark.parametrize("function, terms", [c[1:] for c in CONV1D], ids=[c[0] for c in CONV1D])
def test_conv1d_is_a_conv2d_over_a_unit_height(function: Any, terms: int, rng: np.random.Generator) -> None:
    check_lowered(Fn(function, **_conv_parts()), NCL, ["conv2d", "reshape"], rng, other_shape=(3, 4, 12), reduction_length=terms)


def test_conv1d_on_an_unbatched_input(rng: np.random.Generator) -> None:
    check_lowered(Fn(lambda m, x: m.conv(x), **_conv_parts()), (4, 9), ["conv2d"], rng, other_shape=(4, 7), reduction_length=12)


def test_conv1d_weight_is_reshaped_once_at_conversion() -> None:
    model = swap_backend(Fn(lambda m, x: m.conv(x), **_conv_parts()).eval(), None, NCL)
    conv = next(n for n in model.op_nodes() if n.op == "conv2d")
    assert conv.inputs[1].kind == "constant" and conv.inputs[1].shape == (6, 4, 1, 3)


# ---------------------------------------------------------------------------- transposed convolutions

TRANSPOSED = [
    ("lowformer's upsampling module", lambda m, x: m.up(x), 4 * 4),
    ("strided, padded, dilated, grouped", lambda m, x: m.grouped(x), 2 * 9),
    ("function", lambda m, x: F.conv_transpose2d(x, m.weight, m.bias, stride=2, padding=1, output_padding=1), 4 * 9),
]


@pytest.mark.parametrize("function, terms", [c[1:] for c in TRANSPOSED], ids=[c[0] for c in TRANSPOSED])
def test_conv_transpose2d_is_conv2d_grad_input(function: Any, terms: int, rng: np.random.Generator) -> None:
    torch.manual_seed(0)
    module = Fn(function, up=nn.ConvTranspose2d(4, 6, 2, stride=2),
                grouped=nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2, bias=False),
                weight=nn.Parameter(torch.randn(4, 3, 3, 3)), bias=nn.Parameter(torch.randn(3)))
    check_lowered(module, (2, 4, 5, 6), ["conv2d_grad_input"], rng, other_shape=(1, 4, 3, 7), reduction_length=terms)


POOL1D = [
    ("nextvit's AvgPool1d", lambda m, x: m.avg(x), 2),
    ("MaxPool1d", lambda m, x: m.max(x), 1),
    ("functions", lambda m, x: F.max_pool1d(x, 3, 2, 1) + F.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=False), 3),
]


@pytest.mark.parametrize("function, terms", [c[1:] for c in POOL1D], ids=[c[0] for c in POOL1D])
def test_pool1d_is_a_pool2d_over_a_unit_height(function: Any, terms: int, rng: np.random.Generator) -> None:
    module = Fn(function, avg=nn.AvgPool1d(2), max=nn.MaxPool1d(3, stride=2, padding=1, dilation=2, ceil_mode=True))
    check_lowered(module, NCL, ["reshape"], rng, other_shape=(3, 4, 12), reduction_length=terms)


# ---------------------------------------------------------------------------- resampling

NCHW = (2, 3, 5, 6)
RESAMPLING = [
    ("coat's bilinear by a factor", lambda m, x: F.interpolate(x, scale_factor=2.0, recompute_scale_factor=False,
                                                                mode="bilinear", align_corners=False)),
    ("coat's downsampling", lambda m, x: F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)),
    ("csatv2's size read from a tensor", lambda m, x: F.interpolate(x[:, :, ::2, ::2], size=x.shape[2:], mode="bilinear",
                                                                     align_corners=True)),
    ("nearest to a size", lambda m, x: F.interpolate(x, size=(7, 4))),
    ("hrnet's nearest upsample module", lambda m, x: m.nearest(x)),
    ("efficientformerv2's bilinear upsample module", lambda m, x: m.bilinear(x)),
    ("upsampling modules", lambda m, x: m.nearest2d(x) + m.bilinear2d(x)),
    ("crossvit's bicubic to a size", lambda m, x: F.interpolate(x, size=(8, 9), mode="bicubic", align_corners=False)),
    ("bicubic by a factor, corners aligned", lambda m, x: F.interpolate(x, scale_factor=0.7, mode="bicubic", align_corners=True)),
]


@pytest.mark.parametrize("function", [c[1] for c in RESAMPLING], ids=[c[0] for c in RESAMPLING])
def test_interpolate_and_upsample(function: Any, rng: np.random.Generator) -> None:
    module = Fn(function, nearest=nn.Upsample(scale_factor=4, mode="nearest"), bilinear=nn.Upsample(scale_factor=2, mode="bilinear"),
                nearest2d=nn.UpsamplingNearest2d(scale_factor=2), bilinear2d=nn.UpsamplingBilinear2d(scale_factor=2))
    check_lowered(module, NCHW, ["interpolate"], rng, other_shape=(1, 2, 8, 3))


def test_interpolate_modes_the_op_lacks_are_refused_with_the_reason() -> None:
    for function, words in ((lambda m, x: F.interpolate(x, scale_factor=2, mode="nearest-exact"), "mode"),
                            (lambda m, x: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True), "antialias"),
                            (lambda m, x: F.interpolate(x.flatten(2), size=4), "3-D input")):
        with pytest.raises(UnsupportedModelError, match=words):
            swap_backend(Fn(function).eval(), None, NCHW)


PAD_NONFINITE = [
    ("timm's pad_same before a max pool (nest, vit_r): a border of -inf the pool never picks",
     lambda m, x: F.max_pool2d(F.pad(x, (0, 1, 1, 0), value=-float("inf")), 3, 2), ["pad", "maxpool2d"]),
    ("a border of nan", lambda m, x: F.pad(x, (1, 1, 0, 2), value=float("nan")) * 2, ["pad"]),
]


@pytest.mark.parametrize("function, ops", [c[1:] for c in PAD_NONFINITE], ids=[c[0] for c in PAD_NONFINITE])
def test_pad_with_infinite_and_nan_values(function: Any, ops: list[str], rng: np.random.Generator) -> None:
    check_lowered(Fn(function), (2, 3, 6, 6), ops, rng, other_shape=(1, 3, 9, 7))


# ---------------------------------------------------------------------------- sliding windows and fold

def _halo_blocks(m: Any, x: torch.Tensor) -> torch.Tensor:
    """halonet's key/value blocks: the padded input unfolded into overlapping windows along H, then W."""
    return F.pad(x, (1, 1, 1, 1)).unfold(2, 4, 2).unfold(3, 4, 2)


WINDOWS = [
    ("halonet's blocks", _halo_blocks, (2, 3, 6, 8), (1, 3, 10, 4)),
    ("windows apart and a negative dimension", lambda m, x: x.unfold(-1, 2, 3) * 2, (2, 3, 5, 7), (1, 2, 4, 11)),
    ("one window of the whole dimension, of a 2-D input", lambda m, x: x[0, 0].unfold(0, 5, 1), (2, 3, 5, 7), None),
]


@pytest.mark.parametrize("function, shape, other", [c[1:] for c in WINDOWS], ids=[c[0] for c in WINDOWS])
def test_tensor_unfold_is_strided_slices_along_a_new_last_axis(function: Any, shape: Any, other: Any,
                                                               rng: np.random.Generator) -> None:
    check_lowered(Fn(function), shape, ["slice", "concat", "reshape"], rng, other_shape=other)


def test_tensor_unfold_of_a_dimension_too_short_is_an_error_naming_it() -> None:
    model = swap_backend(Fn(lambda m, x: x.unfold(3, 4, 1)).eval(), None)
    with pytest.raises(Exception, match="windows of 4 every 1"):
        model(torch.zeros(1, 2, 3, 3))


def test_tensor_unfold_of_a_window_size_computed_in_the_model_is_refused_with_the_reason() -> None:
    with pytest.raises(UnsupportedModelError, match="Tensor.unfold with a dimension, size or step computed"):
        swap_backend(Fn(lambda m, x: x.unfold(2, x.shape[2], 1)).eval(), None)  # no sample input: a size unknown


def _volo_fold(m: Any, x: torch.Tensor) -> torch.Tensor:
    """volo's outlook attention: (N, C * 9, H * W) blocks folded back onto (H, W) read from the input."""
    n, c, h, w = x.shape
    return F.fold(F.unfold(x, 3, padding=1), output_size=(h, w), kernel_size=3, padding=1, stride=1)


FOLDS = [
    ("volo's outlook fold", _volo_fold, (2, 3, 5, 6), (1, 3, 7, 4), 9),
    ("strided, dilated, unpadded module", lambda m, x: m.fold(x.reshape(x.shape[0], 12, 6)), (2, 3, 4, 6), None, 1),
    ("padded strided, of an unbatched input", lambda m, x: F.fold(x[0].reshape(8, 9), (5, 4), (2, 2), padding=(1, 0), stride=(2, 1)),
     (2, 3, 4, 6), None, 1),
]


@pytest.mark.parametrize("function, shape, other, terms", [c[1:] for c in FOLDS], ids=[c[0] for c in FOLDS])
def test_fold_places_each_kernel_position_and_adds(function: Any, shape: Any, other: Any, terms: int,
                                                   rng: np.random.Generator) -> None:
    module = Fn(function, fold=nn.Fold((5, 7), (2, 2), dilation=(1, 2), stride=(3, 2)))
    check_lowered(module, shape, ["slice_grad", "add", "slice"], rng, other_shape=other, reduction_length=terms)


def test_fold_of_blocks_that_do_not_tile_the_output_is_an_error_naming_them() -> None:
    model = swap_backend(Fn(lambda m, x: F.fold(x, (4, 4), 2)).eval(), None)
    with pytest.raises(Exception, match=r"fold of a \(1, 8, 5\) input to \(4, 4\).*expected \(N, C \* 4, 9\)"):
        model(torch.zeros(1, 8, 5))


# ---------------------------------------------------------------------------- casts and addcmul


def _norm32(m: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's LayerNorm32 and eva's rotary embedding: casts to the dtype a value already has."""
    y = F.layer_norm(x.float(), (6,), m.weight.float(), None, 1e-5).to(x.dtype)
    z = (y * 2).type_as(x).to(dtype=x.dtype).to("cpu", torch.float32, non_blocking=True).to(x)
    return z.type(torch.float32) + y.to(x.dtype, copy=True)


def test_casts_to_the_dtype_a_value_has_are_no_ops(rng: np.random.Generator) -> None:
    check_lowered(Fn(_norm32, weight=nn.Parameter(torch.randn(6))), NCHW, ["layer_norm", "mul_scalar", "add"], rng,
                  reduction_length=6)


def test_a_device_read_from_a_tensor_is_a_constant(rng: np.random.Generator) -> None:
    """efficientformerv2 and levit read ``x.device`` to place their attention biases beside x."""
    function = lambda m, x: x.to(x.device) + m.bias.to(device=x.device) * m.bias.to(x.device, x.dtype)  # noqa: E731
    check_lowered(Fn(function, bias=nn.Parameter(torch.randn(6))), NCHW, ["add"], rng)


def test_a_cast_to_another_dtype_is_refused_with_the_reason() -> None:
    cases = ((torch.float32, lambda m, x: x.double() * 2, "a cast from torch.float32 to torch.float64"),
             (torch.float32, lambda m, x: x.long(), "to torch.int64"),
             (torch.float16, lambda m, x: F.layer_norm(x.float(), (6,)).to(x.dtype), "the Model computes in torch.float16"))
    for dtype, function, words in cases:
        with pytest.raises(UnsupportedModelError, match=words):
            swap_backend(Fn(function).eval(), None, NCHW, dtype=dtype)


def test_a_cast_needs_the_input_dtype_from_a_sample() -> None:
    with pytest.raises(UnsupportedModelError, match="known only with a sample_input_shape"):
        swap_backend(Fn(lambda m, x: x.float()).eval(), None)


def test_addcmul_and_addcdiv(rng: np.random.Generator) -> None:
    function = lambda m, x: torch.addcmul(m.bias, m.weight, x * x) + x.addcdiv(x, m.weight, value=0.5)  # noqa: E731
    module = Fn(function, weight=nn.Parameter(torch.rand(6) + 0.5), bias=nn.Parameter(torch.randn(6)))
    check_lowered(module, NCHW, ["mul", "add", "div", "mul_scalar"], rng)


# ---------------------------------------------------------------------------- timm's families these unblock

TIMM = [("gcvit_xxtiny", 224), ("coat_tiny", 224), ("efficientvim_m1", 64), ("efficientformerv2_s0", 224),
        ("hrnet_w18_small", 64), ("swin_tiny_patch4_window7_224", 224), ("swinv2_cr_tiny_224", 224),
        ("swinv2_tiny_window16_256", 256), ("tnt_s_legacy_patch16_224", 224), ("crossvit_tiny_240", 240),
        ("jx_nest_tiny", 224), ("vit_tiny_r_s16_p8_224", 224), ("halonet_h1", 256), ("volo_d1_224", 224)]


@pytest.mark.slow
@pytest.mark.parametrize("name, side", TIMM, ids=[t[0] for t in TIMM])
def test_timm_model_converts_whole(name: str, side: int, rng: np.random.Generator) -> None:
    """repeat_interleave (gcvit), interpolate and Conv1d (coat), Conv1d (efficientvim), Upsample (efficientformerv2,
    hrnet), roll (swin, swinv2, swinv2_cr), Unfold (tnt), bicubic interpolate (crossvit), padding with -inf (nest,
    vit_r), Tensor.unfold (halonet), fold (volo): no node left in torch, within 1e-5 of PyTorch in float32 (issue 34's target)."""
    from algoswap import zoo
    from helpers import assert_close, network_terms, relative_error
    from lowering_check import random_input

    module = zoo.build(f"timm:{name}").eval()
    model = swap_backend(module, None, (2, 3, side, side))
    assert not [row for row in model.explain() if row.implementation.startswith("torch")]
    x = random_input(rng, (2, 3, side, side))
    with torch.no_grad():
        ref = module(x)
    out = model(x)
    assert relative_error(out, ref) <= 1e-5
    assert_close(out, ref, **network_terms(module))
