"""Rules for ``nn.Module`` calls (the leaves torch.fx keeps: torch.nn's own modules and layers
swapped before): the swappable ones through their bindings (``modules.py``), the others here,
their attributes read from the module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import fx, nn

from .._errors import OpArgumentError
from .lower_linalg import attention, batch_norm, conv1d, conv_transpose2d, instance_norm, interpolate, layer_norm, pool1d
from .lower_shapes import channel_shuffle, fold, pad, permutation, reshape, unflattened_shape, unfold
from .lowered import Alias, Deferred, Lowered, LoweredOp, Parts, Unsupported, signature
from .lower_recurrent import lstm
from .modules import binding_for

if TYPE_CHECKING:
    from .lowering import Lowerer

ModuleRule = Callable[["Lowerer", Any, Any], Lowered]  # (lowerer, the input x, the module)

IDENTITY_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout, nn.Identity)


def _attrs(op: str, read: Callable[[Any], dict[str, Any]]) -> ModuleRule:
    return lambda lw, x, m: LoweredOp(op, [x], read(m))


def _batch_norm(lw: Lowerer, x: Any, m: Any) -> Lowered:
    if m.running_mean is None or m.running_var is None:
        raise Unsupported("batch norm without running statistics (track_running_stats=False) normalises with batch statistics")
    return batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, m.eps, isinstance(m, nn.BatchNorm2d), m)


def _softmax(op: str) -> ModuleRule:
    def rule(lw: Lowerer, x: Any, m: Any) -> Lowered:
        if m.dim is None:
            raise Unsupported(f"{type(m).__name__} without dim (PyTorch's implicit choice of dimension is deprecated)")
        return LoweredOp(op, [x], {"axis": m.dim})

    return rule


def _pad_module(mode: str) -> ModuleRule:
    return lambda lw, x, m: pad(x, tuple(m.padding), mode, getattr(m, "value", 0.0))


def _max_pool1d(lw: Lowerer, x: Any, m: Any) -> Lowered:
    if m.return_indices:
        raise Unsupported("MaxPool1d with return_indices=True (indices are not computed by algoswap ops)")
    return pool1d("maxpool2d", x, m.kernel_size, m.stride, m.padding, dilation=m.dilation, ceil_mode=m.ceil_mode)


def _conv_transpose2d(lw: Lowerer, x: Any, m: Any) -> Lowered:
    if m.padding_mode != "zeros":
        raise Unsupported(f"ConvTranspose2d with padding_mode={m.padding_mode!r} (torch supports only 'zeros')")
    return conv_transpose2d(x, m.weight, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation)


def _upsample(lw: Lowerer, x: Any, m: Any) -> Lowered:
    return interpolate(lw, x, m.size, m.scale_factor, m.mode, m.align_corners, m.recompute_scale_factor)


_HARDTANH = _attrs("hardtanh", lambda m: {"min_val": m.min_val, "max_val": m.max_val})

MODULES: dict[type[nn.Module], ModuleRule] = {
    nn.BatchNorm1d: _batch_norm, nn.BatchNorm2d: _batch_norm, nn.BatchNorm3d: _batch_norm,
    nn.GroupNorm: lambda lw, x, m: LoweredOp("group_norm", [x, m.weight, m.bias], {"num_groups": m.num_groups, "eps": m.eps}),
    **dict.fromkeys((nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d), _upsample),
    nn.Unfold: lambda lw, x, m: unfold(x, m.kernel_size, m.dilation, m.padding, m.stride),
    nn.Fold: lambda lw, x, m: fold(x, m.output_size, m.kernel_size, m.dilation, m.padding, m.stride),
    nn.MaxPool1d: _max_pool1d, nn.ConvTranspose2d: _conv_transpose2d,
    nn.InstanceNorm2d: lambda lw, x, m: instance_norm(lw, x, m.weight, m.bias, not m.track_running_stats or m.training, m.eps),
    nn.AvgPool1d: lambda lw, x, m: pool1d("avgpool2d", x, m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode,
                                          count_include_pad=m.count_include_pad),
    nn.Conv1d: lambda lw, x, m: conv1d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups, m.padding_mode),
    nn.ReLU6: _HARDTANH, nn.Hardtanh: _HARDTANH,
    nn.SiLU: _attrs("silu", lambda m: {}), nn.Mish: _attrs("mish", lambda m: {}),
    nn.GELU: _attrs("gelu", lambda m: {"approximate": m.approximate}),
    nn.Hardswish: _attrs("hardswish", lambda m: {}), nn.Hardsigmoid: _attrs("hardsigmoid", lambda m: {}),
    nn.ELU: _attrs("elu", lambda m: {"alpha": m.alpha}),
    nn.LeakyReLU: _attrs("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
    nn.Sigmoid: _attrs("sigmoid", lambda m: {}), nn.Tanh: _attrs("tanh", lambda m: {}),
    nn.Softmax: _softmax("softmax"), nn.LogSoftmax: _softmax("log_softmax"),
    nn.LayerNorm: lambda lw, x, m: layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps),
    nn.Unflatten: lambda lw, x, m: reshape(x, Deferred(unflattened_shape, (x, m.dim, tuple(m.unflattened_size)))),
    nn.ChannelShuffle: lambda lw, x, m: channel_shuffle(x, m.groups),
    nn.ZeroPad2d: _pad_module("constant"), nn.ConstantPad2d: _pad_module("constant"),
    nn.ReflectionPad2d: _pad_module("reflect"), nn.ReplicationPad2d: _pad_module("replicate"),
}  # fmt: skip


def lower_module(lw: Lowerer, node: fx.Node, module: nn.Module) -> Lowered:
    if isinstance(module, nn.MultiheadAttention):
        return _multihead_attention(lw, node, module)
    if isinstance(module, nn.LSTM):
        return lstm(lw, node, module)
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported(f"{type(module).__name__} called with {len(node.args)} arguments and keywords {sorted(node.kwargs)}")
    x = node.args[0]
    if isinstance(module, IDENTITY_MODULES):
        return Alias(x)
    binding = binding_for(module)
    if binding is not None:
        try:
            attrs = binding.attrs(module)
        except OpArgumentError as exc:
            raise Unsupported(str(exc)) from None
        sentinel = torch.empty(0, device="meta")
        inputs = [x if t is sentinel else t for t in binding.inputs(module, sentinel)]
        return LoweredOp(binding.op, inputs, attrs, module)
    rule = MODULES.get(type(module))
    if rule is None:
        raise Unsupported(f"no registry op runs {type(module).__name__} modules")
    lowered = rule(lw, x, module)
    if isinstance(lowered, LoweredOp) and lowered.module is None:
        lowered.module = module
    return lowered


# ---------------------------------------------------------------------------- attention


def heads_shape(array: Any, heads: int, embed: int) -> tuple[int, ...]:
    """A projection of ``array`` (..., features) split into heads: (..., heads, embed // heads)."""
    return (*tuple(array.shape)[:-1], heads, embed // heads)


def merged_shape(array: Any, embed: int) -> tuple[int, ...]:
    return (*tuple(array.shape)[:-1], embed)


_MHA = signature("query", "key", "value", key_padding_mask=None, need_weights=True, attn_mask=None,
                 average_attn_weights=True, is_causal=False)


def _multihead_attention(lw: Lowerer, node: fx.Node, m: nn.MultiheadAttention) -> Lowered:
    """Per input a linear projection, split into heads and moved to (batch, heads, length, head size);
    scaled dot-product attention; the heads moved back and merged; the output projection."""
    bound = lw.bind(_MHA, node)
    for name in ("key_padding_mask", "attn_mask"):
        if bound[name] is not None:
            raise Unsupported(f"MultiheadAttention with {name} (only unmasked attention is lowered)")
    if bound["is_causal"] or m.bias_k is not None or m.add_zero_attn:
        raise Unsupported("MultiheadAttention with is_causal, bias_k/bias_v or add_zero_attn")
    lw.check_users_index(node)
    if bound["need_weights"] and any(user.args[1] == 1 and user.users for user in node.users):
        raise Unsupported("MultiheadAttention's attention weights are read (need_weights=True); only its output is lowered")
    query = bound["query"]
    shape = lw.shape(query)
    if shape is not None and len(shape) != 3:
        raise Unsupported(f"MultiheadAttention on a {len(shape)}-D input (only batched 3-D inputs are lowered)")
    embed, heads = m.embed_dim, m.num_heads
    to_heads, from_heads = ((0, 2, 1, 3), (0, 2, 1, 3)) if m.batch_first else ((1, 2, 0, 3), (2, 0, 1, 3))

    def project(x: Any, index: int) -> LoweredOp:
        weight, bias = _projection(m, index)
        split = reshape(LoweredOp("linear", [x, weight, bias], {}), Deferred(heads_shape, (x, heads, embed)))
        return permutation(split, to_heads)

    out = attention(project(query, 0), project(bound["key"], 1), project(bound["value"], 2))
    merged = reshape(permutation(out, from_heads), Deferred(merged_shape, (query, embed)))
    result = LoweredOp("linear", [merged, m.out_proj.weight, m.out_proj.bias], {}, m)
    return Parts(lambda i: result if i == 0 else Alias(None))


def _projection(m: nn.MultiheadAttention, index: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias projecting the query (0), key (1) or value (2)."""
    embed = m.embed_dim
    if m._qkv_same_embed_dim:
        weight = m.in_proj_weight[index * embed : (index + 1) * embed]
    else:
        weight = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)[index]
    bias = None if m.in_proj_bias is None else m.in_proj_bias[index * embed : (index + 1) * embed]
    return weight, bias

