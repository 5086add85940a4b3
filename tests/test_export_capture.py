"""swap_backend's capture by torch.export (issue 34): forwards torch.fx cannot trace, values computed from
sizes and weights alone folded into constants, sizes as torch reads them, the guard on the sizes export
fixed, and the ops that models captured so need (roll, transposed convolutions, clamp)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.errors import ConversionError  # noqa: E402
from algoswap.graph import GraphError  # noqa: E402
from helpers import assert_close  # noqa: E402
from lowering_check import Fn, check_lowered, random_input  # noqa: E402

NCHW = (2, 4, 6, 8)
ODD = (2, 4, 6, 7)  # _branches_on_sizes pads it


def _branches_on_sizes(m: Any, x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % 2:  # torch.fx: "symbolically traced variables cannot be used as inputs to control flow"
        x = F.pad(x, (0, 1))
    return m.conv(x) * 2


def _sine_position(m: Any, x: torch.Tensor) -> torch.Tensor:
    """EdgeNeXt's positional encoding: masks, cumsum, arange, floor division, sin/cos of sizes alone."""
    b, c, h, w = x.shape
    mask = torch.zeros(b, h, w).bool()
    rows = (~mask).cumsum(1, dtype=torch.float32)
    cols = (~mask).cumsum(2, dtype=torch.float32)
    steps = torch.arange(c // 2, dtype=torch.float32, device=x.device)
    steps = 10000 ** (2 * (steps // 2) / (c // 2))
    position = torch.cat([(rows[..., None] / steps).sin(), (cols[..., None] / steps).cos()], dim=3).permute(0, 3, 1, 2)
    return x + position


def test_a_forward_that_branches_on_sizes_is_captured_by_export(rng: np.random.Generator) -> None:
    module = Fn(_branches_on_sizes, conv=nn.Conv2d(4, 3, 3)).eval()
    with pytest.raises(ConversionError, match="torch.fx cannot trace Fn.*give a sample_input_shape"):
        swap_backend(module)
    with pytest.raises(ConversionError, match="torch.fx cannot trace"):
        swap_backend(module, None, ODD, tracer="torch.fx")
    model = check_lowered(module, ODD, ["pad", "conv2d"], rng, other_shape=(3, *ODD[1:]))
    assert model.tracer == "torch.export" and "traced by torch.export" in repr(model)
    assert swap_backend(Fn(lambda m, x: x * 2).eval(), None, NCHW).tracer == "torch.fx"  # fx when it serves


def test_sizes_only_computations_become_constants_at_every_batch(rng: np.random.Generator) -> None:
    """torch.export folds the encoding's ops (cumsum, sin, ...) into one constant.
    The batch size enters the encoding: the batch is fixed too, and another is refused by the guard."""
    module = Fn(_sine_position).eval()
    with pytest.raises(ConversionError, match="torch.fx cannot trace"):  # torch.zeros of traced sizes
        swap_backend(module, None, NCHW, fallback="torch", tracer="torch.fx")
    model = swap_backend(module, None, NCHW)
    assert model.tracer == "torch.export"
    assert [row.op for row in model.explain()] == ["add"]
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=1)
    with pytest.raises(GraphError, match=r"captured by torch.export with input shape \(2, 4, 6, 8\); it cannot run an input "
                                         r"of shape \(3, 4, 6, 8\): convert it again with that sample_input_shape"):
        model(random_input(rng, (3, *NCHW[1:])))


def test_export_keeps_the_batch_dynamic_where_the_model_allows(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: m.conv(x[:, :, :, :-1] if x.shape[-1] % 2 else x).flatten(1)[:, 2:], conv=nn.Conv2d(4, 3, 3)).eval()
    model = check_lowered(module, NCHW, ["conv2d"], rng, other_shape=(5, *NCHW[1:]))
    assert model.tracer == "torch.export"
    with pytest.raises(GraphError, match=r"input shape \(\*, 4, 6, 8\) \(\* any size\)"):
        model(random_input(rng, (2, 4, 6, 10)))


def test_a_sample_batch_of_one_fixes_the_batch(rng: np.random.Generator) -> None:
    """torch.export specialises sizes of 1; the Model then takes that batch only."""
    module = Fn(_branches_on_sizes, conv=nn.Conv2d(4, 3, 3)).eval()
    model = swap_backend(module, None, (1, *NCHW[1:]))
    with pytest.raises(GraphError, match=r"input shape \(1, 4, 6, 8\)"):
        model(random_input(rng, NCHW))


def test_an_item_counted_from_the_end_is_read_as_python_reads_it(rng: np.random.Generator) -> None:
    """Res2Net and EdgeNeXt take ``x.split(...)[-1]``; torch.fx and torch.export alike."""
    module = Fn(lambda m, x: x.split(3, dim=-1)[-1].sum(-1, keepdim=True) * x + x.chunk(2, dim=1)[-1].sum(1, keepdim=True)
                + x.unbind(2)[-1].mean())
    check_lowered(module, NCHW, ["split"], rng, other_shape=(3, 4, 6, 9), reduction_length=8)


def test_roll_is_lowered_for_any_shift(rng: np.random.Generator) -> None:
    """Swin's shifted windows: positive, negative, larger than the size, and a multiple of it (no empty piece)."""
    module = Fn(lambda m, x: torch.roll(x, shifts=(-3, 2), dims=(2, 3)) + x.roll(17, 3) + torch.roll(x, 8, -1))
    check_lowered(module, NCHW, ["concat", "slice"], rng, other_shape=(3, 4, 5, 7))


def test_transposed_convolutions_are_the_gradient_of_a_convolution(rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: m.up(x) + F.conv_transpose2d(x, m.grouped.weight, stride=2, output_padding=1, groups=2)[:, :, 1:, 1:],
                up=nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                grouped=nn.ConvTranspose2d(4, 6, 2, groups=2, bias=False))
    check_lowered(module, NCHW, ["conv2d_grad_input", "add"], rng, other_shape=(1, 4, 5, 7), reduction_length=36)


@pytest.mark.parametrize("tracer", ["torch.fx", "torch.export"])
def test_clamp_keeps_nan_and_infinities_as_torch(tracer: str, rng: np.random.Generator) -> None:
    module = Fn(lambda m, x: torch.clamp(x, min=-0.5) + x.clamp(-0.2, 0.3) + torch.clamp(x, max=0.1) + x.clamp_min(0.05)).eval()
    model = swap_backend(module, None, NCHW, tracer=tracer)
    x = random_input(rng, NCHW)
    x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(model(x), module(x), equal_nan=True, rtol=0, atol=0)


def test_a_constant_computed_from_a_weights_size_is_folded(rng: np.random.Generator) -> None:
    """A torch.Size among the constants (HaloNet's) is read as it is."""
    module = Fn(lambda m, x: x + torch.zeros(m.w.shape) + m.w, w=nn.Parameter(torch.randn(NCHW[1:]), requires_grad=False))
    check_lowered(module, NCHW, ["add"], rng)


def test_a_model_captured_by_export_pickles(rng: np.random.Generator) -> None:
    import pickle

    module = Fn(_sine_position).eval()
    model = pickle.loads(pickle.dumps(swap_backend(module, None, NCHW)))
    assert model.tracer == "torch.export"
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=1)
    with pytest.raises(GraphError, match="captured by torch.export"):
        model(random_input(rng, (3, *NCHW[1:])))


@pytest.mark.parametrize("zero", [0, 0.0])
def test_a_tensor_divided_by_a_python_zero_is_as_in_torch(zero: float, rng: np.random.Generator) -> None:
    """FastViT divides by a number computed from sizes that can be 0: torch.fx plans it as a product by the
    reciprocal, which a 0 refuses; torch.export sees the 0 and divides as torch does (infinities, NaN for 0 and
    NaN). A literal -0.0 keeps its sign (torch.export's symbolic sizes lose it: ``-0.0 * s0`` becomes 0.0)."""
    module = Fn(lambda m, x: torch.cat([x / (zero * x.shape[0]), x / -0.0], 1)).eval()
    model = swap_backend(module, None, NCHW)
    assert model.tracer == "torch.export"
    x = random_input(rng, NCHW)
    x[0, 0, 0, :4] = torch.tensor([0.0, float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(model(x), module(x), equal_nan=True, rtol=0, atol=0)


def test_an_in_place_aten_op_is_its_twin_and_its_readers_read_it(rng: np.random.Generator) -> None:
    """EfficientViT's ``F.hardswish(x, inplace=True)`` is ``aten.hardswish_`` in torch.export's graph."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if x.shape[-1] % 2 == 0:  # torch.export only
            F.hardswish(y, inplace=True)
            y.relu_()
        return y + 1

    model = check_lowered(Fn(forward), NCHW, ["hardswish", "relu", "add_scalar"], rng)
    assert model.tracer == "torch.export"


def test_python_arithmetic_on_sizes_is_computed_when_planning(rng: np.random.Generator) -> None:
    """VOLO pads to ``math.ceil(H / stride) * stride``: the math functions torch.fx records, of sizes."""
    import math

    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        pad_h, pad_w = math.ceil(h / 4) * 4 - h, math.trunc(w / 3) - math.floor(w / 4) + abs(h - w)
        return F.pad(x, (0, pad_w, 0, pad_h)) * math.floor(math.sqrt(h))

    model = check_lowered(Fn(forward), NCHW, ["pad", "mul_scalar"], rng, other_shape=(3, 4, 7, 5))
    assert model.tracer == "torch.fx"


def test_a_split_into_sizes_is_lowered_from_export(rng: np.random.Generator) -> None:
    """EfficientViT (MSRA) splits by a list of sizes: ``aten.split_with_sizes``."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        a, b = (x * 2).split([1, 3], dim=1) if x.shape[-1] % 2 == 0 else (x, x)
        return a * b
    model = check_lowered(Fn(forward), NCHW, ["split", "mul"], rng)
    assert model.tracer == "torch.export"


def test_layers_keep_their_names_and_modules_under_export(rng: np.random.Generator) -> None:
    """Selectors by layer name, and functions receiving the layer, see torch.export's nodes as torch.fx's."""
    module = Fn(_branches_on_sizes, conv=nn.Conv2d(4, 3, 3)).eval()
    seen: list[Any] = []

    def choose(layer: Any) -> str:
        seen.append(layer)
        return "numpy:direct" if isinstance(layer, nn.Conv2d) else "default"

    model = swap_backend(module, {"conv": "numpy:smm"}, ODD)
    assert model.tracer == "torch.export"
    row = next(row for row in model.explain() if row.op == "conv2d")
    assert row.implementation == "numpy:smm", row
    model = swap_backend(module, choose, ODD)
    assert any(layer is module.conv for layer in seen)
    assert next(row for row in model.explain() if row.op == "conv2d").implementation == "numpy:direct"


def test_a_tensor_plus_or_times_a_python_zero_is_lowered(rng: np.random.Generator) -> None:
    """``x + 0`` and ``x * 0`` (FastViT, Hiera) failed converting: the reciprocal of 0 was computed for every kind."""
    module = Fn(lambda m, x: (x + 0) * 2 + x * 0 - 0)
    check_lowered(module, NCHW, ["add_scalar", "mul_scalar"], rng)


def test_a_region_without_autocast_is_inlined(rng: np.random.Generator) -> None:
    """EfficientViT computes its attention under ``torch.autocast(enabled=False)``: export wraps the region."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        y = m.conv(x) if x.shape[-1] % 2 == 0 else x
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ y.float().transpose(-1, -2) + m.bias
        return z.relu()

    model = check_lowered(Fn(forward, conv=nn.Conv2d(4, 4, 1), bias=nn.Parameter(torch.randn(6, 6), requires_grad=False)),
                          NCHW, ["batch_matmul", "relu"], rng, reduction_length=9)
    assert model.tracer == "torch.export"


def test_negative_padding_crops(rng: np.random.Generator) -> None:
    """PNASNet pads by (-1, 1, -1, 1): a crop at the start, a zero row and column at the end."""
    module = Fn(lambda m, x: F.pad(x, (-1, 1, -2, 1)) + m.crop(x), crop=nn.ZeroPad2d((-1, 1, -2, 1)))
    check_lowered(module, NCHW, ["slice", "pad"], rng, other_shape=(1, 4, 5, 3))


@pytest.mark.parametrize("equation", ["bhwc,hkc->bhwk", "bhwc,wkc->bhwk", "bij,bjk->bik", "ijc,cd->idj", "bcn,bcm->bnm"])
def test_einsum_products_of_grouped_letters(equation: str, rng: np.random.Generator) -> None:
    """SAM's decomposed relative positions: rows, columns or contracted sizes of several letters."""
    sizes = {"b": 2, "h": 3, "w": 4, "c": 5, "k": 6, "i": 3, "j": 4, "d": 2, "n": 3, "m": 4}
    left, right = equation.split("->")[0].split(",")
    weight = nn.Parameter(torch.randn(*(sizes[c] for c in right)), requires_grad=False)
    module = Fn(lambda m, x: torch.einsum(equation, x.reshape(*(sizes[c] for c in left)), m.w), w=weight)
    shape = (1, math.prod(sizes[c] for c in left))
    check_lowered(module, shape, [], rng, other_shape=shape, reduction_length=6)


@pytest.mark.parametrize("tracer", ["torch.fx", "torch.export"])
def test_rms_norm_and_clamps_by_constant_tensors(tracer: str, rng: np.random.Generator) -> None:
    """Gemma's vision tower: F.rms_norm, and clamps by one-element buffers (infinite ones clamp nothing)."""
    module = Fn(lambda m, x: F.rms_norm(torch.clamp(x, m.low, m.high), (6, 8), m.w, 1e-6)
                + F.rms_norm(x.clamp(min=m.none_low, max=m.none_high), [8]) + x.clamp(max=m.high),
                w=nn.Parameter(torch.rand(6, 8) + 0.5, requires_grad=False))
    module.register_buffer("low", torch.tensor(-0.5))
    module.register_buffer("high", torch.tensor([0.75]))
    module.register_buffer("none_low", torch.tensor(-float("inf")))
    module.register_buffer("none_high", torch.tensor(float("inf")))
    model = swap_backend(module.eval(), None, NCHW, tracer=tracer)
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=8, reduction_length=48)
    assert "rsqrt" in [row.op for row in model.explain()]


def test_empty_pieces_of_a_concatenation_are_dropped_under_export(rng: np.random.Generator) -> None:
    """Qwen3-VL's rotary embedding concatenates the rotated part with an empty rest."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        rotated, rest = x[..., :8], x[..., 8:]
        y = torch.cat([rotated.flip(-1) if x.shape[-1] % 2 else rotated * 2, rest], dim=-1)
        return torch.cat([y, x[:, :0]], dim=1) + 1

    model = check_lowered(Fn(forward), NCHW, ["mul_scalar", "add_scalar"], rng)
    assert model.tracer == "torch.export" and "concat" not in [row.op for row in model.explain()]


def test_windows_and_folds_are_read_back_from_aten(rng: np.random.Generator) -> None:
    """``aten.unfold`` is Tensor.unfold (HaloNet), ``aten.im2col`` F.unfold and ``aten.col2im`` F.fold (VOLO)."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        x = x * 2 if x.shape[-1] % 2 == 0 else x
        windows = x.unfold(3, 4, 2).sum(-1)  # (2, 4, 6, 3)
        columns = F.unfold(x, 2, stride=2)  # (2, 16, 12)
        return windows.flatten(1) + F.fold(columns, (6, 8), 2, stride=2).flatten(1)[:, :72]

    model = check_lowered(Fn(forward), NCHW, ["slice_grad"], rng, reduction_length=4)
    assert model.tracer == "torch.export"


def test_an_attention_bias_gathered_from_a_table_is_a_constant(rng: np.random.Generator) -> None:
    """TinyViT and EfficientViT (MSRA) index their bias table by a buffer of indices, ``biases[:, idxs]``:
    ATen's ``index(biases, [None, idxs])``, whose None keeps the dimension whole; folded at conversion."""
    module = Fn(lambda m, x: (x.flatten(2).transpose(1, 2) @ x.flatten(2) if x.shape[-1] % 2 == 0 else x) + m.table[:, m.idxs],
                table=nn.Parameter(torch.randn(2, 5), requires_grad=False))
    module.register_buffer("idxs", torch.randint(0, 5, (48, 48)))
    model = check_lowered(module.eval(), (2, 2, 6, 8), ["batch_matmul", "add"], rng, other_shape=(2, 2, 6, 8), reduction_length=3)
    assert model.tracer == "torch.export"


def test_writes_into_a_slice_become_functional(rng: np.random.Generator) -> None:
    """MViTv2 adds its relative positions into ``attn[:, :, 1:, 1:]`` in place: torch.export's functional form
    (``slice_scatter``) joins the untouched parts with the new values, and a fill is ones times the value; the
    batch norm is folded into the convolution as under torch.fx."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        y = m.bn(m.conv(x))
        if y.shape[-1] % 2 == 0:
            y[:, :, 1:, 2:] = y[:, :, 1:, 2:] * 3 + 1
            y[:, :1] = 0.5
        return y.relu()

    module = Fn(forward, conv=nn.Conv2d(4, 4, 1), bn=nn.BatchNorm2d(4)).eval()
    model = check_lowered(module, NCHW, ["conv2d", "concat"], rng, reduction_length=5)
    assert model.tracer == "torch.export" and model.folded_batchnorms  # the weights are get_attr nodes there


def test_a_scaled_elu_from_aten_keeps_its_scale(rng: np.random.Generator) -> None:
    """``aten.elu(x, alpha, scale, input_scale)``: its third argument is F.elu's ``inplace``; read as F.elu's, a
    scaled ELU lost its scale."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 2 if x.shape[-1] % 2 == 0 else x
        return F.elu(y, 0.5) + y + torch.ops.aten.elu(y, 1.0, 2.0, 1.0)  # scaled: no F.elu twin

    module = Fn(forward).eval()
    model = swap_backend(module, None, NCHW, fallback="torch")
    assert model.tracer == "torch.export"
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=4)


@pytest.mark.parametrize("tracer", ["torch.fx", "torch.export"])
def test_instance_norms_are_lowered_as_torch_orders_their_arguments(tracer: str, rng: np.random.Generator) -> None:
    """ATen's instance_norm takes (input, weight, bias, running_mean, running_var, ...), F.instance_norm
    (input, running_mean, running_var, weight, bias, ...)."""
    module = Fn(lambda m, x: m.affine(x) + m.plain(x) * 2 + F.instance_norm(x, weight=m.w, eps=1e-3),
                affine=nn.InstanceNorm2d(4, affine=True), plain=nn.InstanceNorm2d(4),
                w=nn.Parameter(torch.rand(4) + 0.5, requires_grad=False)).eval()
    with torch.no_grad():
        module.affine.weight.uniform_(0.5, 1.5)
        module.affine.bias.uniform_(-1, 1)
    model = swap_backend(module, None, NCHW, tracer=tracer)
    assert "instance_norm" in [row.op for row in model.explain()]
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=6, reduction_length=48)


def test_a_resize_by_a_scale_per_side_stays_an_aten_op(rng: np.random.Generator) -> None:
    """``aten.upsample_bilinear2d.default(x, size, align_corners, scales_h, scales_w)`` is no ``.vec`` call: read as
    one, its align_corners was lost."""
    def forward(m: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 2 if x.shape[-1] % 2 == 0 else x
        return torch.ops.aten.upsample_bilinear2d.default(y, [9, 11], True) + 1

    module = Fn(forward).eval()
    model = swap_backend(module, None, NCHW, fallback="torch")
    assert model.tracer == "torch.export"
    x = random_input(rng, NCHW)
    with torch.no_grad():
        assert_close(model(x), module(x), layers=3, reduction_length=4)


def test_rms_norm_without_eps_takes_the_compute_dtypes_epsilon(rng: np.random.Generator) -> None:
    """torch's default eps is the input dtype's machine epsilon: float64's here, which tiny inputs show."""
    module = Fn(lambda m, x: F.rms_norm(x, (8,))).eval()
    model = swap_backend(module, None, NCHW, dtype=torch.float64)
    x = random_input(rng, NCHW).double() * 1e-5
    with torch.no_grad():
        ref = module(x)
    torch.testing.assert_close(model(x), ref, rtol=1e-12, atol=0)
