"""Rules for torchvision's functions that torch.fx keeps as one call (``torch.fx.wrap``), matched by
qualified name (torchvision is never imported here): stochastic depth, and the Swin Transformer's
patch merging and shifted-window attention (V2's cosine attention too), written as the registry ops their
code amounts to."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from .lower_linalg import attention, normalized
from .lower_shapes import pad, permutation, reshape, tensor_index
from .lowered import Alias, Deferred, Handler, Lowered, LoweredOp, Unsupported, signature

if TYPE_CHECKING:
    from .lowering import Lowerer


def _stochastic_depth(lw: Lowerer, node: fx.Node) -> Lowered:
    """``stochastic_depth(input, p, mode, training)``: the identity in eval mode."""
    bound = lw.bind(signature("input", "p", "mode", training=True), node)
    if bound["training"] is not False and bound["p"] != 0:
        raise Unsupported("stochastic depth with training=True (random); convert the model in eval mode")
    return Alias(bound["input"])


# ---------------------------------------------------------------------------- patch merging


def merged_patches_shape(array: Any) -> tuple[int, ...]:
    """(..., H, W, C) with H and W even, as (..., H/2, 2, W/2, 2, C)."""
    *lead, h, w, c = array.shape
    return (*lead, h // 2, 2, w // 2, 2, c)


def patches_perm(array: Any) -> tuple[int, ...]:
    """(..., H/2, 2 (row), W/2, 2 (column), C) to (..., H/2, W/2, column, row, C): the order of torchvision's cat."""
    lead = tuple(range(len(array.shape) - 5))
    h = len(lead)
    return (*lead, h, h + 2, h + 3, h + 1, h + 4)


def merged_shape(array: Any) -> tuple[int, ...]:
    *lead, h, w, _, _, c = array.shape
    return (*lead, h, w, 4 * c)


def even_pads(array: Any) -> tuple[tuple[int, int], ...]:
    """Zeros after H and W to make them even."""
    h, w = array.shape[-3], array.shape[-2]
    return ((0, h % 2), (0, w % 2), (0, 0))


def _patch_merging_pad(lw: Lowerer, node: fx.Node) -> Lowered:
    """x (..., H, W, C) padded to even H, W, and its 2x2 patches' pixels side by side on channels:
    ``cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)``."""
    x = lw.bind(signature("x"), node)["x"]
    padded = LoweredOp("pad", [x], {"pads": Deferred(even_pads, (x,)), "mode": "constant", "value": 0.0})
    split = reshape(padded, Deferred(merged_patches_shape, (padded,)))
    moved = LoweredOp("transpose", [split], {"perm": Deferred(patches_perm, (split,))})
    return reshape(moved, Deferred(merged_shape, (moved,)))


# ---------------------------------------------------------------------------- shifted windows


def windows_shape(array: Any, size: tuple[int, int], padded: tuple[int, int], window: tuple[int, int]) -> tuple[int, ...]:
    """The padded (B, H, W, C) as (B, H / wh, wh, W / ww, ww, C); the rule was made for inputs of ``size`` only."""
    b, h, w, c = array.shape
    if (h, w) != tuple(padded):
        given = (h - padded[0] + size[0], w - padded[1] + size[1])
        raise ValueError(f"shifted_window_attention was lowered for inputs of {size[0]}x{size[1]} (the sample's); "
                         f"got {given[0]}x{given[1]}: convert the model again with a sample of this size")
    return (b, h // window[0], window[0], w // window[1], window[1], c)


def _roll(lw: Lowerer, x: Any, shifts: tuple[int, int], sizes: tuple[int, int]) -> Any:
    """torch.roll(x, shifts, dims=(1, 2)) as two slices and a concat per dimension."""
    for dim, (shift, n) in enumerate(zip(shifts, sizes), start=1):
        cut = -shift % n
        if cut:
            head = (slice(None),) * dim
            x = LoweredOp("concat", [tensor_index(lw, x, (*head, slice(cut, None))), tensor_index(lw, x, (*head, slice(0, cut)))],
                          {"axis": dim})
    return x


def _shift_mask(padded: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    """torchvision's attention mask of shifted windows: (windows, N, N), -100 between pixels of different regions."""
    regions = torch.zeros(padded)
    bounds = [((0, -w), (-w, -s), (-s, None)) for w, s in zip(window, shift)]
    for count, ((h0, h1), (w0, w1)) in enumerate((h, w) for h in bounds[0] for w in bounds[1]):
        regions[h0:h1, w0:w1] = count
    windows = (padded[0] // window[0]) * (padded[1] // window[1])
    regions = regions.view(padded[0] // window[0], window[0], padded[1] // window[1], window[1])
    regions = regions.permute(0, 2, 1, 3).reshape(windows, window[0] * window[1])
    differ = regions.unsqueeze(1) - regions.unsqueeze(2)
    return torch.where(differ != 0, -100.0, 0.0)


_SWA = signature("input", "qkv_weight", "proj_weight", "relative_position_bias", "window_size", "num_heads", "shift_size",
                 attention_dropout=0.0, dropout=0.0, qkv_bias=None, proj_bias=None, logit_scale=None, training=True)


def _shifted_window_attention(lw: Lowerer, node: fx.Node) -> Lowered:
    """torchvision's window attention of (B, H, W, C) inputs: padded to whole windows, rolled by the shift,
    cut into windows, multi-head attention in each (relative position bias and the shift's mask as one
    additive mask), and back. The structure depends on H and W: lowered for the sample's size."""
    a = lw.bind(_SWA, node)
    if a["training"] is not False and (a["attention_dropout"] or a["dropout"]):
        raise Unsupported("dropout with training=True (random); convert the model in eval mode")
    shape, bias = lw.shape(a["input"]), lw.constants.get(a["relative_position_bias"])
    if shape is None or len(shape) != 4 or not isinstance(bias, torch.Tensor):
        raise Unsupported("shifted window attention is lowered for a known input size (pass sample_input_shape) and fixed position biases")
    (_, h, w, c), window, heads = shape, (int(a["window_size"][0]), int(a["window_size"][1])), int(a["num_heads"])
    padded = (h + (-h % window[0]), w + (-w % window[1]))
    shift = (int(a["shift_size"][0]) if window[0] < padded[0] else 0, int(a["shift_size"][1]) if window[1] < padded[1] else 0)
    windows, size = (padded[0] // window[0]) * (padded[1] // window[1]), window[0] * window[1]
    x = pad(a["input"], (0, 0, 0, padded[1] - w, 0, padded[0] - h)) if padded != (h, w) else a["input"]
    x = _roll(lw, x, (-shift[0], -shift[1]), padded)
    x = reshape(permutation(reshape(x, Deferred(windows_shape, (x, (h, w), padded, window))), (0, 1, 3, 2, 4, 5)), (-1, windows, size, c))
    cosine = a["logit_scale"] is not None
    qkv = LoweredOp("linear", [x, a["qkv_weight"], _key_bias_zeroed(lw, a["qkv_bias"]) if cosine else a["qkv_bias"]], {})
    qkv = permutation(reshape(qkv, (-1, windows, size, 3, heads, c // heads)), (3, 0, 1, 4, 2, 5))  # (3, B, windows, heads, N, d)
    q, k, v = (tensor_index(lw, qkv, i) for i in range(3))
    mask = bias if sum(shift) == 0 else bias + _shift_mask(padded, window, shift).unsqueeze(1)  # (windows or 1, heads, N, N)
    if cosine:
        q, k = LoweredOp("mul", [normalized(q, -1, 1e-12), _logit_scale(lw, a["logit_scale"])], {}), normalized(k, -1, 1e-12)
    out = permutation(attention(q, k, v, mask, scale=1.0 if cosine else None), (0, 1, 3, 2, 4))  # (B, windows, N, heads, d)
    out = LoweredOp("linear", [reshape(out, (-1, windows, size, c)), a["proj_weight"], a["proj_bias"]], {})
    out = reshape(out, (-1, padded[0] // window[0], padded[1] // window[1], window[0], window[1], c))
    out = _roll(lw, reshape(permutation(out, (0, 1, 3, 2, 4, 5)), (-1, *padded, c)), shift, padded)
    return out if padded == (h, w) else tensor_index(lw, out, (slice(None), slice(0, h), slice(0, w)))


def _logit_scale(lw: Lowerer, value: Any) -> torch.Tensor:
    """Swin V2's per-head temperature of its cosine attention, exp(min(logit_scale, log 100)), as a constant."""
    scale = lw.constants.get(value) if isinstance(value, fx.Node) else value
    if not isinstance(scale, torch.Tensor):
        raise Unsupported("Swin V2's cosine attention with a logit_scale computed in forward (only a weight is lowered)")
    with torch.no_grad():
        return torch.clamp(scale, max=math.log(100.0)).exp()


def _key_bias_zeroed(lw: Lowerer, value: Any) -> Any:
    """The qkv bias with its key third zeroed, as torchvision's cosine attention uses it."""
    bias = lw.constants.get(value) if isinstance(value, fx.Node) else value
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor):
        raise Unsupported("Swin V2's cosine attention with a qkv_bias computed in forward (only a weight is lowered)")
    bias, length = bias.detach().clone(), bias.numel() // 3
    bias[length:2 * length] = 0
    return bias


NAMED: dict[str, Handler] = {
    "torchvision.ops.stochastic_depth.stochastic_depth": _stochastic_depth,
    "torchvision.models.swin_transformer._patch_merging_pad": _patch_merging_pad,
    "torchvision.models.swin_transformer.shifted_window_attention": _shifted_window_attention,
}
