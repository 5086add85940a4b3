"""Rules for the ops that combine or reduce: linear, convolution, pooling, normalisations (batch norm of
any rank, group and layer norm), reductions and 2-norms over dimensions, matrix products (``@``, ``bmm``, the einsum forms that are a batched
matrix product) and scaled dot-product attention."""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import fx

from .lower_python import shape_of
from .lower_shapes import parts, permutation, reshape, swapped_perm, unsqueezed_shape
from .lowered import Deferred, Handler, Lowered, LoweredOp, Unsupported, deferred, op_rule, signature

if TYPE_CHECKING:
    from .lowering import Lowerer


def layer_norm(x: Any, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> LoweredOp:
    """``layer_norm`` over the trailing dimensions ``normalized_shape`` names (an int, a list, or sizes computed in forward)."""
    if isinstance(normalized_shape, int):
        ndim: Any = 1
    elif isinstance(normalized_shape, (list, tuple, torch.Size)):
        ndim = len(normalized_shape)
    else:
        ndim = Deferred(len, (normalized_shape,))
    return LoweredOp("layer_norm", [x, weight, bias], {"normalized_ndim": ndim, "eps": eps})


def _layer_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "normalized_shape", weight=None, bias=None, eps=1e-5), node)
    return layer_norm(bound["input"], bound["normalized_shape"], bound["weight"], bound["bias"], bound["eps"])


def trailing_axes(count: int) -> tuple[int, ...]:
    """The last ``count`` dimensions, counted from the end."""
    return tuple(range(-count, 0))


def rms_norm(x: Any, normalized_shape: Any, weight: Any, eps: float) -> Lowered:
    """``F.rms_norm``, as torch computes it: x * rsqrt(mean(x * x over the trailing dimensions) + eps), then the
    weight."""
    count = 1 if isinstance(normalized_shape, int) else deferred(len, normalized_shape)
    squares = LoweredOp("reduce_mean", [LoweredOp("mul", [x, x], {})], {"axes": deferred(trailing_axes, count), "keepdims": True})
    scale = LoweredOp("rsqrt", [LoweredOp("add_scalar", [squares], {"value": eps})], {})
    normed = LoweredOp("mul", [x, scale], {})
    return normed if weight is None else LoweredOp("mul", [normed, weight], {})


def _rms_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "normalized_shape", weight=None, eps=None), node)
    eps = float(torch.finfo(lw.dtype).eps) if bound["eps"] is None else bound["eps"]  # torch's default: its dtype's
    return rms_norm(bound["input"], bound["normalized_shape"], bound["weight"], eps)


def channels_first_4d(array: Any) -> tuple[int, int, int, int]:
    """(N, C, *rest) as (N, C, prod(rest), 1): the 4-D shape a batch norm of any other rank runs on."""
    n, c, *rest = array.shape
    return n, c, math.prod(rest), 1


def batch_norm(x: Any, mean: Any, var: Any, weight: Any, bias: Any, eps: float, four_d: bool,
               module: Any = None) -> LoweredOp:
    """Inference batch norm: ``batchnorm2d`` on NCHW input; input of another rank (BatchNorm1d's (N, C) and
    (N, C, L), BatchNorm3d's) reshaped to (N, C, prod(rest), 1) for it and back (two views)."""
    if four_d:
        return LoweredOp("batchnorm2d", [x, mean, var, weight, bias], {"eps": eps}, module)
    seen = reshape(x, Deferred(channels_first_4d, (x,)))
    return reshape(LoweredOp("batchnorm2d", [seen, mean, var, weight, bias], {"eps": eps}, module), Deferred(shape_of, (x,)))


_BATCH_NORM_SIG = signature("input", "running_mean", "running_var", weight=None, bias=None, training=False, momentum=0.1,
                            eps=1e-5)


def _batch_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    """``F.batch_norm`` in inference (running statistics), of any rank; its rank unknown, as NCHW (the op checks)."""
    bound = lw.bind(_BATCH_NORM_SIG, node)
    if bound["training"] is not False:
        raise Unsupported(f"training={bound['training']!r} (only training=False is supported)")
    if bound["running_mean"] is None or bound["running_var"] is None:
        raise Unsupported("batch norm without running statistics normalises with batch statistics")
    shape = lw.shape(bound["input"])
    return batch_norm(bound["input"], bound["running_mean"], bound["running_var"], bound["weight"], bound["bias"],
                      bound["eps"], shape is None or len(shape) == 4)


def instance_norm(lw: Lowerer, x: Any, weight: Any, bias: Any, use_input_stats: bool, eps: float) -> LoweredOp:
    """``F.instance_norm`` / ``nn.InstanceNorm2d`` with each sample's own statistics: the ``instance_norm`` op (NCHW)."""
    shape = lw.shape(x)
    if not use_input_stats:
        raise Unsupported("instance norm with running statistics (use_input_stats=False) is not lowered")
    if shape is not None and len(shape) != 4:
        raise Unsupported(f"instance norm of a {len(shape)}-D input (the instance_norm op takes NCHW)")
    return LoweredOp("instance_norm", [x, weight, bias], {"eps": eps})


def _instance_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                              momentum=0.1, eps=1e-5), node)
    return instance_norm(lw, bound["input"], bound["weight"], bound["bias"], bound["use_input_stats"], bound["eps"])


def euclidean_norm(x: Any, dim: Any, keepdim: bool) -> LoweredOp:
    """sqrt(sum(x * x)) over ``dim`` (every dimension when None), as torch's 2-norm computes it (no rescaling:
    inf where the squares overflow, as torch's float32 does; NaN and inf kept)."""
    squares = LoweredOp("reduce_sum", [LoweredOp("mul", [x, x], {})], {"axes": _axes(dim), "keepdims": keepdim})
    return LoweredOp("sqrt", [squares], {})


def _two_norm(what: str, order: Any, dtype: Any, out: Any) -> None:
    """Only the 2-norm, in the input's dtype, is lowered."""
    if dtype is not None or out is not None:
        raise Unsupported(f"{what} with {'dtype' if dtype is not None else 'out'}= (only the input's own dtype is lowered)")
    if isinstance(order, bool) or order not in (2, "fro"):
        raise Unsupported(f"{what} of order {order!r} (only the 2-norm, sqrt(sum(x * x)), is lowered)")


def _norm(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.norm`` and ``Tensor.norm``: p=2, or "fro" (the same over at most two dimensions)."""
    bound = lw.bind(signature("input", p="fro", dim=None, keepdim=False, out=None, dtype=None), node)
    _two_norm("torch.norm", bound["p"], bound["dtype"], bound["out"])
    if bound["p"] == "fro" and isinstance(bound["dim"], (list, tuple)) and len(bound["dim"]) > 2:
        raise Unsupported(f"torch.norm p='fro' over dim={bound['dim']!r} (torch takes at most two dimensions)")
    return euclidean_norm(bound["input"], bound["dim"], bound["keepdim"])


def _vector_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("x", ord=2, dim=None, keepdim=False, dtype=None, out=None), node)
    if bound["ord"] == "fro":
        raise Unsupported("torch.linalg.vector_norm with ord='fro' (a matrix norm)")
    _two_norm("torch.linalg.vector_norm", bound["ord"], bound["dtype"], bound["out"])
    return euclidean_norm(bound["x"], bound["dim"], bound["keepdim"])


def _linalg_norm(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.linalg.norm``: ord None (the 2-norm of the elements over dim, all of them when None), "fro", or
    2 over one dimension (a vector); ord=2 over two dimensions is the spectral norm, not lowered."""
    bound = lw.bind(signature("A", ord=None, dim=None, keepdim=False, out=None, dtype=None), node)
    order, dim = bound["ord"], bound["dim"]
    _two_norm("torch.linalg.norm", 2 if order is None else order, bound["dtype"], bound["out"])
    vector = isinstance(dim, int) or (isinstance(dim, (list, tuple)) and len(dim) == 1)
    if order == 2 and not vector and (dim is not None or lw.rank(bound["A"], "torch.linalg.norm with ord=2") != 1):
        raise Unsupported("torch.linalg.norm with ord=2 over a matrix (its largest singular value: no registry op computes it)")
    return euclidean_norm(bound["A"], dim, bound["keepdim"])


def _reduction(op: str) -> Handler:
    """``x.mean(dim, keepdim)``, ``torch.sum(x, dim=(2, 3))``: every dimension when dim is None."""
    sig = signature("input", dim=None, keepdim=False, dtype=None)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        if bound["dtype"] is not None:
            raise Unsupported(f"{op} with dtype={bound['dtype']} (it computes in the model's dtype)")
        return LoweredOp(op, [bound["input"]], {"axes": _axes(bound["dim"]), "keepdims": bound["keepdim"]})

    return handler


def _axes(dim: Any) -> tuple[Any, ...] | None:
    """A reduction's ``dim`` as the op's axes: None (or an empty one, as torch.amax's default) for every dimension."""
    if dim is None or dim == () or dim == []:
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


def extreme(x: Any, dim: Any, keepdim: bool, lowest: bool) -> LoweredOp:
    """The maximum over ``dim`` (``reduce_max``); the minimum is the negated maximum of the negated input (exact)."""
    if lowest:
        return LoweredOp("neg", [extreme(LoweredOp("neg", [x], {}), dim, keepdim, False)], {})
    return LoweredOp("reduce_max", [x], {"axes": _axes(dim), "keepdims": keepdim})


def _max_min(lowest: bool) -> Handler:
    """``torch.max(x)``, and ``x.max(dim, keepdim)``: a named tuple whose ``values`` are lowered and whose
    ``indices`` (argmax) are not, so a node reading them is left to PyTorch whole. The elementwise
    ``torch.max(a, b)`` is not lowered."""
    sig = signature("input", dim=None, keepdim=False)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        x, dim, keepdim = bound["input"], bound["dim"], bound["keepdim"]
        if dim is None:
            return extreme(x, None, keepdim, lowest)
        if not isinstance(dim, int):
            raise Unsupported(f"{'min' if lowest else 'max'} with a second argument {dim!r}: only one literal dimension is "
                              "lowered (no registry op takes the elementwise extreme of two tensors)")

        def item(index: int) -> Lowered:
            if index != 0:
                raise Unsupported(f"its indices are read ({'argmin' if lowest else 'argmax'}), which no registry op computes")
            return extreme(x, dim, keepdim, lowest)

        return parts(lw, node, item, ("values", "indices"))

    return handler


def _amax_amin(lowest: bool) -> Handler:
    sig = signature("input", dim=(), keepdim=False)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        return extreme(bound["input"], bound["dim"], bound["keepdim"], lowest)

    return handler


def normalized(x: Any, dim: int, eps: float) -> LoweredOp:
    """``F.normalize(x, p=2, dim, eps)``: x / max(sqrt(sum(x * x, dim)), eps)."""
    return LoweredOp("div", [x, LoweredOp("clamp_min", [euclidean_norm(x, dim, True)], {"value": eps})], {})


def _normalize(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", p=2.0, dim=1, eps=1e-12, out=None), node)
    if bound["p"] != 2 or bound["out"] is not None:
        raise Unsupported(f"F.normalize with p={bound['p']!r}{' and out=' if bound['out'] is not None else ''} (only p=2 is lowered)")
    if not isinstance(bound["dim"], int):
        raise Unsupported(f"F.normalize over dim={bound['dim']!r} (only one literal dimension is lowered)")
    return normalized(bound["input"], bound["dim"], bound["eps"])


# ---------------------------------------------------------------------------- matrix products


def _last_two_swapped(lw: Lowerer, value: Any, rank: int) -> Any:
    """The source of ``value`` if it is a transpose of the last two axes that nothing else reads (so
    the product can read its source transposed instead), else None."""
    lowered = lw.results.get(value) if isinstance(value, fx.Node) else None
    if not isinstance(lowered, LoweredOp) or lowered.op != "transpose" or len(value.users) != 1:
        return None
    perm = lowered.attrs["perm"]
    source = lowered.inputs[0]
    if isinstance(perm, Deferred) and perm.function is swapped_perm:
        ends = {d % rank for d in perm.args[1:] if isinstance(d, int)}
        return source if ends == {rank - 2, rank - 1} else None
    swap = (*range(rank - 2), rank - 1, rank - 2)
    return source if perm == swap or perm is None and rank == 2 else None


def _lifted(lw: Lowerer, x: Any) -> Any:
    """A 2-D operand of a batched product as (1, rows, columns): a weight now, a computed value by a reshape."""
    weight = lw.constants.get(x) if isinstance(x, fx.Node) else x
    if isinstance(weight, torch.Tensor):
        return weight.unsqueeze(0)
    return reshape(x, Deferred(unsqueezed_shape, (x, 0)))


def matrix_product(lw: Lowerer, a: Any, b: Any, trans_a: bool = False, trans_b: bool = False) -> LoweredOp:
    """``a @ b`` (torch.matmul) for operands of rank >= 2: ``matmul`` for two matrices, else
    ``batch_matmul`` with the batch dimensions broadcast; a transpose of the last two axes
    feeding it alone becomes its trans_a / trans_b flag."""
    ranks = (lw.rank(a, "torch.matmul"), lw.rank(b, "torch.matmul"))
    if min(ranks) < 2:
        raise Unsupported("a matrix product with a 1-D operand (only operands of rank >= 2 are lowered)")
    for which, (value, rank) in enumerate(zip((a, b), ranks)):
        source = _last_two_swapped(lw, value, rank)
        if source is not None:
            a, trans_a = (source, not trans_a) if which == 0 else (a, trans_a)
            b, trans_b = (b, trans_b) if which == 0 else (source, not trans_b)
    if ranks == (2, 2):
        return LoweredOp("matmul", [a, b], {"trans_a": trans_a, "trans_b": trans_b})
    a, b = (_lifted(lw, v) if r == 2 else v for v, r in zip((a, b), ranks))
    return LoweredOp("batch_matmul", [a, b], {"trans_a": trans_a, "trans_b": trans_b})


def _matmul(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "other"), node)
    return matrix_product(lw, bound["input"], bound["other"])


def _bmm(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "mat2"), node)
    return LoweredOp("batch_matmul", [bound["input"], bound["mat2"]], {"trans_a": False, "trans_b": False})


def _einsum_letters(equation: str, count: int) -> tuple[list[str], str]:
    text = equation.replace(" ", "")
    if "." in text:
        raise Unsupported("einsum with an ellipsis (only explicit letters are lowered)")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if not arrow:  # implicit output: the letters that appear once, in alphabetical order
        output = "".join(sorted(c for c in set(inputs) if c.isalpha() and inputs.count(c) == 1))
    if len(terms) != count or count != 2:
        raise Unsupported(f"einsum {equation!r} of {count} operands (only products of two are lowered)")
    if any(len(set(t)) != len(t) for t in (*terms, output)):
        raise Unsupported(f"einsum {equation!r} repeats a letter within a term (a diagonal)")
    return terms, output


def einsum(lw: Lowerer, equation: str, a: Any, b: Any) -> LoweredOp:
    """The einsum forms that are a (batched) matrix product: one row letter of a, one column letter of
    b, one contracted letter, the other letters batch letters of both and of the output; operands and
    result transposed as the letters' order asks."""
    (la, lb), out = _einsum_letters(equation, 2)
    batch = [c for c in out if c in la and c in lb]
    rows, cols = [c for c in la if c not in lb], [c for c in lb if c not in la]
    inner = [c for c in la if c in lb and c not in out]
    if set(out) != {*batch, *rows, *cols} or len(batch) + len(rows) + len(cols) + len(inner) != len(set(la + lb)):
        raise Unsupported(f"einsum {equation!r} is not one (batched) matrix product (a letter of one operand is summed)")
    if len(rows) != 1 or len(cols) != 1 or len(inner) != 1:
        return _merged_einsum(a, b, la, lb, out, batch, rows, cols, inner)
    (m,), (n,), (k,) = rows, cols, inner
    a, trans_a = _ordered(a, la, batch, m, k)
    b, trans_b = _ordered(b, lb, batch, k, n)
    product = LoweredOp("batch_matmul" if batch else "matmul", [a, b], {"trans_a": trans_a, "trans_b": trans_b})
    made = "".join(batch) + m + n
    return product if made == out else permutation(product, tuple(made.index(c) for c in out))


def _merged_einsum(a: Any, b: Any, la: str, lb: str, out: str, batch: list[str], rows: list[str], cols: list[str],
                   inner: list[str]) -> LoweredOp:
    """An einsum whose rows, columns or contracted sizes are several letters (SAM's 'bhwc,hkc->bhwk'): each group
    merged into one size by a reshape, one (batched) product, the letters split again and ordered as asked."""
    left = _grouped(a, la, [c for g in (batch, rows, inner) for c in g], [g for g in (batch, rows, inner) if g])
    right = _grouped(b, lb, [c for g in (batch, inner, cols) for c in g], [g for g in (batch, inner, cols) if g])
    product = LoweredOp("batch_matmul" if batch else "matmul", [left, right], {"trans_a": False, "trans_b": False})
    made = "".join(batch + rows + cols)
    value = reshape(product, Deferred(letter_sizes, (a, b, la, lb, made)))
    return value if made == out else permutation(value, tuple(made.index(c) for c in out))


def _grouped(x: Any, letters: str, order: list[str], groups: list[list[str]]) -> LoweredOp:
    perm = tuple(letters.index(c) for c in order)
    ordered = x if perm == tuple(range(len(perm))) else permutation(x, perm)
    return reshape(ordered, Deferred(merged_sizes, (x, letters, tuple("".join(g) for g in groups))))


def merged_sizes(array: Any, letters: str, groups: tuple[str, ...]) -> tuple[int, ...]:
    """The sizes of ``array`` (its dimensions named by ``letters``) with each group of letters multiplied."""
    return tuple(math.prod(int(array.shape[letters.index(c)]) for c in group) for group in groups)


def letter_sizes(a: Any, b: Any, la: str, lb: str, letters: str) -> tuple[int, ...]:
    """The size of each of ``letters`` in the operands ``a`` and ``b``."""
    sizes = {**{c: int(n) for c, n in zip(lb, b.shape)}, **{c: int(n) for c, n in zip(la, a.shape)}}
    return tuple(sizes[c] for c in letters)


def _ordered(x: Any, letters: str, batch: list[str], first: str, second: str) -> tuple[Any, bool]:
    """``x`` with its letters as batch + (first, second), or batch + (second, first) read transposed."""
    straight, swapped = "".join(batch) + first + second, "".join(batch) + second + first
    if letters == straight:
        return x, False
    if letters == swapped:
        return x, True
    return permutation(x, tuple(letters.index(c) for c in straight)), False


def _einsum(lw: Lowerer, node: fx.Node) -> Lowered:
    equation, *operands = node.args
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    if not isinstance(equation, str) or node.kwargs:
        raise Unsupported("einsum with an equation computed in forward")
    _einsum_letters(equation, len(operands))
    return einsum(lw, equation, operands[0], operands[1])


def attention(query: Any, key: Any, value: Any, attn_mask: Any = None, is_causal: bool = False, scale: Any = None) -> LoweredOp:
    """``scaled_dot_product_attention``; scale None: the op's default, 1 / sqrt(the query's last size)."""
    attrs: dict[str, Any] = {"is_causal": is_causal} if scale is None else {"is_causal": is_causal, "scale": scale}
    return LoweredOp("scaled_dot_product_attention", [query, key, value, attn_mask], attrs)


def _sdpa(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("query", "key", "value", attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                              enable_gqa=False), node)
    if bound["dropout_p"] != 0:
        raise Unsupported(f"dropout_p={bound['dropout_p']!r} (random; attention dropout must be 0 in eval mode)")
    if bound["enable_gqa"]:
        raise Unsupported("enable_gqa=True (grouped-query attention)")
    return attention(bound["query"], bound["key"], bound["value"], bound["attn_mask"], bound["is_causal"], bound["scale"])


# ---------------------------------------------------------------------------- 1-D convolution


def as_image_shape(array: Any) -> tuple[int, ...]:
    """A 1-D convolution's input (N, C, L), or an unbatched (C, L), as the image (N, C, 1, L)."""
    shape = tuple(array.shape)
    return (1, *shape[:1], 1, *shape[1:]) if len(shape) == 2 else (*shape[:2], 1, *shape[2:])


def as_sequence_shape(array: Any, image: Any) -> tuple[int, ...]:
    """The image (N, O, 1, L') a 1-D convolution computed, as torch's (N, O, L') (or (O, L') for an unbatched ``array``)."""
    n, channels, _, length = tuple(image.shape)
    return (channels, length) if len(array.shape) == 2 else (n, channels, length)


def _row(value: Any, height: int) -> Any:
    """A 1-D convolution's stride, padding or dilation (an int or a 1-tuple) as the (height, width) pair of
    its conv2d; a padding string ('same', 'valid') as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise Unsupported(f"a 1-D convolution with {value!r} (one value expected)")
        value = value[0]
    return (height, value)


def conv1d(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any,
           padding_mode: str = "zeros") -> LoweredOp:
    """A 1-D convolution as a ``conv2d`` over a unit height (its kernel a row): the input viewed as
    (N, C, 1, L), the result viewed back. A weight known now is reshaped once, here."""
    if isinstance(weight, torch.Tensor):
        weight = weight.detach().unsqueeze(2)
    else:
        weight = reshape(weight, Deferred(unsqueezed_shape, (weight, 2)))
    attrs = {"stride": _row(stride, 1), "padding": _row(padding, 0), "dilation": _row(dilation, 1), "groups": groups,
             "padding_mode": padding_mode}
    return over_unit_height("conv2d", x, [weight, bias], attrs)


def over_unit_height(op: str, x: Any, weights: list[Any], attrs: dict[str, Any]) -> LoweredOp:
    """A 1-D op of a sequence (N, C, L) as the 2-D ``op`` of the image (N, C, 1, L), the result viewed back."""
    image = LoweredOp(op, [reshape(x, Deferred(as_image_shape, (x,))), *weights], attrs)
    return reshape(image, Deferred(as_sequence_shape, (x, image)))


def pool1d(op: str, x: Any, kernel_size: Any, stride: Any, padding: Any, **rest: Any) -> LoweredOp:
    """``max_pool1d`` / ``avg_pool1d`` as ``maxpool2d`` / ``avgpool2d`` over a unit height (stride None: the kernel's)."""
    stride = kernel_size if stride is None or stride == () else stride
    attrs = {"kernel_size": _row(kernel_size, 1), "stride": _row(stride, 1), "padding": _row(padding, 0), **rest}
    if "dilation" in attrs:
        attrs["dilation"] = _row(attrs["dilation"], 1)
    return over_unit_height(op, x, [], attrs)


def _max_pool1d(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "kernel_size", stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False), node)
    if bound.pop("return_indices"):
        raise Unsupported("max_pool1d with return_indices=True (indices are not computed by algoswap ops)")
    return pool1d("maxpool2d", bound.pop("input"), **bound)


def _avg_pool1d(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "kernel_size", stride=None, padding=0, ceil_mode=False, count_include_pad=True), node)
    return pool1d("avgpool2d", bound.pop("input"), **bound)


def _conv1d(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "weight", bias=None, stride=1, padding=0, dilation=1, groups=1), node)
    weight = lw.constants.get(bound["weight"], bound["weight"]) if isinstance(bound["weight"], fx.Node) else bound["weight"]
    return conv1d(bound["input"], weight, bound["bias"], bound["stride"], bound["padding"], bound["dilation"], bound["groups"])


# ---------------------------------------------------------------------------- transposed convolution


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[-1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


def transposed_size(array: Any, weight: Any, stride: Any, padding: Any, output_padding: Any, dilation: Any,
                    groups: int) -> tuple[int, ...]:
    """The output (N, C_out, H_out, W_out) of ``conv_transpose2d``: (in - 1) * stride - 2 * padding +
    dilation * (kernel - 1) + output_padding + 1 along each spatial axis."""
    n, _, *spatial = (int(s) for s in array.shape)
    _, per_group, *kernel = (int(s) for s in weight.shape)
    sizes = zip(spatial, kernel, _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation))
    return (n, per_group * groups, *((i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, k, s, p, o, d in sizes))


def conv_transpose2d(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, output_padding: Any, groups: int,
                     dilation: Any) -> Lowered:
    """``conv_transpose2d`` is the gradient of conv2d with respect to its input (``conv2d_grad_input``): its
    weight (C_in, C_out / groups, KH, KW) is that conv2d's (O, C / groups, KH, KW); the bias added after."""
    if isinstance(padding, str):
        raise Unsupported(f"conv_transpose2d with padding={padding!r}")
    size = Deferred(transposed_size, (x, weight, stride, padding, output_padding, dilation, groups))
    out = LoweredOp("conv2d_grad_input", [x, weight], {"input_size": size, "stride": stride, "padding": padding,
                                                        "dilation": dilation, "groups": groups})
    if bias is None:
        return out
    return LoweredOp("add", [out, bias.detach().reshape(-1, 1, 1) if isinstance(bias, torch.Tensor) else
                             reshape(bias, Deferred(_channels_column, (bias,)))], {})


def _channels_column(array: Any) -> tuple[int, ...]:
    return (int(array.shape[0]), 1, 1)


def _conv_transpose2d(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "weight", bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1), node)
    bias = lw.constants.get(bound["bias"], bound["bias"]) if isinstance(bound["bias"], fx.Node) else bound["bias"]
    return conv_transpose2d(bound["input"], bound["weight"], bias, bound["stride"], bound["padding"],
                            bound["output_padding"], bound["groups"], bound["dilation"])


# ---------------------------------------------------------------------------- resampling


def interpolate(lw: Lowerer, x: Any, size: Any, scale_factor: Any, mode: str, align_corners: Any,
                recompute_scale_factor: Any, antialias: bool = False) -> LoweredOp:
    """``F.interpolate`` of an NCHW input (the ``interpolate`` op: modes nearest, bilinear and bicubic; the op's
    spec refuses the others, naming them)."""
    shape = lw.shape(x)
    if shape is not None and len(shape) != 4:
        raise Unsupported(f"interpolate of a {len(shape)}-D input (only NCHW inputs are lowered)")
    if antialias:
        raise Unsupported("interpolate with antialias=True (the interpolate op does not low-pass filter)")
    return LoweredOp("interpolate", [x], {"size": size, "scale_factor": scale_factor, "mode": mode,
                                          "align_corners": align_corners, "recompute_scale_factor": recompute_scale_factor})


def _interpolate(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", size=None, scale_factor=None, mode="nearest", align_corners=None,
                              recompute_scale_factor=None, antialias=False), node)
    return interpolate(lw, bound.pop("input"), **bound)


_MAXPOOL = op_rule(
    "maxpool2d", signature("input", "kernel_size", stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False),
    ("input",), require={"return_indices": False},
)
_AVGPOOL = op_rule(
    "avgpool2d", signature("input", "kernel_size", stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None),
    ("input",),
)
_MEAN, _SUM = _reduction("reduce_mean"), _reduction("reduce_sum")
_MAX, _MIN, _AMAX, _AMIN = _max_min(False), _max_min(True), _amax_amin(False), _amax_amin(True)

FUNCTIONS: dict[Any, Handler] = {
    F.max_pool2d: _MAXPOOL, torch.max_pool2d: _MAXPOOL,
    F.avg_pool2d: _AVGPOOL,
    F.adaptive_avg_pool2d: op_rule("adaptiveavgpool2d", signature("input", "output_size"), ("input",)),
    F.linear: op_rule("linear", signature("input", "weight", bias=None), ("input", "weight", "bias")),
    F.conv2d: op_rule("conv2d", signature("input", "weight", bias=None, stride=1, padding=0, dilation=1, groups=1), ("input", "weight", "bias")),
    F.batch_norm: _batch_norm,
    F.group_norm: op_rule("group_norm", signature("input", "num_groups", weight=None, bias=None, eps=1e-5), ("input", "weight", "bias")),
    F.conv1d: _conv1d, torch.conv1d: _conv1d, F.interpolate: _interpolate,
    F.conv_transpose2d: _conv_transpose2d, torch.conv_transpose2d: _conv_transpose2d,
    F.max_pool1d: _max_pool1d, torch.max_pool1d: _max_pool1d, F.avg_pool1d: _avg_pool1d, torch.avg_pool1d: _avg_pool1d,
    F.layer_norm: _layer_norm, F.normalize: _normalize, F.rms_norm: _rms_norm, F.instance_norm: _instance_norm,
    torch.norm: _norm, torch.linalg.vector_norm: _vector_norm, torch.linalg.norm: _linalg_norm,
    torch.mean: _MEAN, torch.sum: _SUM,
    torch.max: _MAX, torch.min: _MIN, torch.amax: _AMAX, torch.amin: _AMIN,
    torch.matmul: _matmul, operator.matmul: _matmul, torch.bmm: _bmm,
    torch.einsum: _einsum,
    F.scaled_dot_product_attention: _sdpa,
}  # fmt: skip

METHODS: dict[str, Handler] = {
    "mean": _MEAN, "sum": _SUM, "matmul": _matmul, "bmm": _bmm, "norm": _norm,
    "max": _MAX, "min": _MIN, "amax": _AMAX, "amin": _AMIN,
}
