"""Data-movement rules: views and reshapes, permutations, expansion, indexing and slicing,
chunk/split/unbind, concatenation and stacking, padding and channel shuffle.

Sizes these ops need (a permutation from the input's rank, a slice's bounds, a view's shape) are
``Deferred``: computed when planning from the shapes the Model is called with, so one conversion
serves every input shape for which torch's own rule gives the same structure.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import fx

from .lower_python import numel_of, python_getitem, shape_of
from .lowered import (Alias, Deferred, Handler, Lowered, LoweredOp, Parts, Unsupported, deferred, signature,
                      sizes_argument, varargs)

if TYPE_CHECKING:
    from .lowering import Lowerer

# ---------------------------------------------------------------------------- shape functions
# (module level, so that models pickle; ``array`` is anything with a ``shape``)


def _dim(dim: int, rank: int) -> int:
    if not -rank <= dim < rank:
        raise IndexError(f"dimension {dim} out of range for a {rank}-D array")
    return dim % rank


def normalized_perm(array: Any, dims: tuple[int, ...]) -> tuple[int, ...]:
    """``permute(dims)`` with negative dimensions counted from the end."""
    return tuple(_dim(d, len(array.shape)) for d in dims)


def swapped_perm(array: Any, dim0: int, dim1: int) -> tuple[int, ...]:
    """The permutation of ``transpose(dim0, dim1)``."""
    rank = len(array.shape)
    perm = list(range(rank))
    a, b = _dim(dim0, rank), _dim(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return tuple(perm)


def unsqueezed_shape(array: Any, dim: int) -> tuple[int, ...]:
    shape = list(array.shape)
    shape.insert(_dim(dim, len(shape) + 1), 1)
    return tuple(shape)


def squeezed_shape(array: Any, dims: Any = None) -> tuple[int, ...]:
    shape = tuple(array.shape)
    chosen = range(len(shape)) if dims is None else [_dim(d, len(shape)) for d in (dims if isinstance(dims, (tuple, list)) else (dims,))]
    return tuple(s for d, s in enumerate(shape) if not (d in chosen and s == 1))


def without_dim(array: Any, dim: int) -> tuple[int, ...]:
    shape = list(array.shape)
    del shape[_dim(dim, len(shape))]
    return tuple(shape)


def size_along(array: Any, dim: int) -> int:
    return int(array.shape[_dim(dim, len(array.shape))])


def expanded_shape(array: Any, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``expand(*sizes)``: -1 keeps the size; new leading dimensions may be added."""
    shape, new = tuple(array.shape), len(sizes) - len(array.shape)
    if new < 0:
        raise ValueError(f"expand to {len(sizes)} sizes {tuple(sizes)} of a {len(shape)}-D array")
    return tuple(int(shape[d - new]) if s == -1 and d >= new else int(s) for d, s in enumerate(sizes))


def spread_shape(array: Any, dim: int, repeats: int) -> tuple[int, ...]:
    """``repeat_interleave``'s middle step: a new axis of ``repeats`` after ``dim``."""
    shape = list(array.shape)
    d = _dim(dim, len(shape)) + 1
    return tuple(shape[:d] + [int(repeats)] + shape[d:])


def interleaved_shape(array: Any, dim: int, repeats: int) -> tuple[int, ...]:
    """``repeat_interleave``'s result: ``dim`` ``repeats`` times as long."""
    shape = list(array.shape)
    shape[_dim(dim, len(shape))] *= int(repeats)
    return tuple(shape)


def rolled_window(array: Any, shift: int, dim: int) -> tuple[int, ...]:
    """``roll``'s slice of the input concatenated to itself along ``dim``: from n - shift mod n, n long."""
    shape = tuple(array.shape)
    d = _dim(dim, len(shape))
    return tuple(int(shape[d]) - int(shift) % int(shape[d]) if k == d else 0 for k in range(len(shape)))


def tiled_shape(array: Any, repeats: tuple[int, ...], stage: int) -> tuple[int, ...]:
    """``repeat``'s shapes: (stage 0) the input with a unit axis before each of its axes (padded in front to as
    many as the repeats), (1) that broadcast to the repeats, (2) the result."""
    shape = (1,) * (len(repeats) - len(array.shape)) + tuple(int(s) for s in array.shape)
    if len(shape) > len(repeats):
        raise ValueError(f"repeat with {len(repeats)} repeats of a {len(array.shape)}-D array (at least one per dimension)")
    pairs = [(int(r) if stage else 1, s) for r, s in zip(repeats, shape)]
    return tuple(r * s for r, s in pairs) if stage == 2 else tuple(v for p in pairs for v in p)


def _pairs(*values: Any) -> list[tuple[int, int]]:
    return [(int(v[0]), int(v[-1])) if isinstance(v, (tuple, list)) else (int(v), int(v)) for v in values]


def patch_size(array: Any, kernel: Any, dilation: Any, stride: Any) -> tuple[int, ...]:
    """``unfold``'s slice for one kernel position of the (padded) input: (N, C, out_h, out_w)."""
    n, c, *spatial = (int(s) for s in array.shape)
    out = [(size - d * (k - 1) - 1) // s + 1 for size, (k, d, s) in zip(spatial, zip(*(_pairs(kernel, dilation, stride))))]
    if min(out) < 1:
        raise ValueError(f"unfold of a {tuple(array.shape)} input with kernel {kernel}, dilation {dilation}: no whole window")
    return (n, c, *out)


def patch_rows(array: Any, count: int) -> tuple[int, ...]:
    """``count`` kernel positions' patches (N, C, out_h, out_w) as (N, C * count, L), L = out_h * out_w
    (count 0: one patch as (N, C, 1, L), to be concatenated along axis 2)."""
    n, c, h, w = (int(s) for s in array.shape)
    return (n, c, 1, h * w) if count == 0 else (n, c * count, h * w)


def unfold(x: Any, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> LoweredOp:
    """``F.unfold`` (im2col) of NCHW input: per kernel position (i, j) the strided slice of the padded input from
    (i * dilation, j * dilation), every stride; the positions concatenated in torch's order (channel-major)."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _pairs(kernel_size, dilation, padding, stride)
    padded = pad(x, (pw, pw, ph, ph)) if (ph, pw) != (0, 0) else x
    size = Deferred(patch_size, (padded, kernel_size, dilation, stride))
    patches = []
    for i in range(kh):
        for j in range(kw):
            patch = LoweredOp("slice", [padded], {"begin": (0, 0, i * dh, j * dw), "size": size, "step": (1, 1, sh, sw)})
            patches.append(reshape(patch, Deferred(patch_rows, (patch, 0))))
    merged = LoweredOp("concat", patches, {"axis": 2}) if len(patches) > 1 else patches[0]
    return reshape(merged, Deferred(patch_rows, (patches[0].inputs[0], kh * kw)))


def window_bounds(array: Any, dim: int, offset: int, size: int, step: int, part: str) -> tuple[int, ...]:
    """``Tensor.unfold(dim, size, step)``'s slice of the elements at ``offset`` in every window: its begin, size
    or step (``part``), one per dimension."""
    shape = [int(s) for s in array.shape]
    d = _dim(dim, len(shape))
    if step < 1 or not 0 < size <= shape[d]:
        raise ValueError(f"unfold of dimension {dim} (size {shape[d]}) into windows of {size} every {step}: "
                         "expected 0 < size <= the dimension's size and step >= 1")
    values = {"begin": [0] * len(shape), "step": [1] * len(shape), "size": shape}[part]
    values[d] = {"begin": offset, "step": step, "size": (shape[d] - size) // step + 1}[part]
    return tuple(values)


def windows(x: Any, dim: int, size: int, step: int) -> LoweredOp:
    """``Tensor.unfold(dim, size, step)``: sliding windows as a new last dimension; per offset k < size the
    strided slice of the elements at k in every window, each with a unit last axis, concatenated along it."""
    parts = []
    for offset in range(size):
        bounds = {part: Deferred(window_bounds, (x, dim, offset, size, step, part)) for part in ("begin", "size", "step")}
        part = LoweredOp("slice", [x], bounds)
        parts.append(reshape(part, Deferred(unsqueezed_shape, (part, -1))))
    return LoweredOp("concat", parts, {"axis": -1})


def fold_shapes(array: Any, output_size: Any, kernel: Any, dilation: Any, padding: Any, stride: Any,
                part: str) -> tuple[int, ...]:
    """``F.fold``'s shapes for an input (N, C * kh * kw, L) or (C * kh * kw, L): (``part``) "blocks" (N, C,
    kh * kw, L), "block" one kernel position's (N, C, 1, L), "patch" it as (N, C, out_h, out_w), "padded" the
    padded output (N, C, H + 2 ph, W + 2 pw), "output" (N, C, H, W) and "result" torch's (the batch kept or not)."""
    *batch, rows, length = (int(s) for s in array.shape)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (h, w) = _pairs(kernel, dilation, padding, stride, output_size)
    n, c = (batch or [1])[0], rows // (kh * kw)
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, d, p, s in ((h, kh, dh, ph, sh), (w, kw, dw, pw, sw))]
    if len(batch) > 1 or rows % (kh * kw) or min(out) < 1 or out[0] * out[1] != length:
        raise ValueError(f"fold of a {tuple(array.shape)} input to {(h, w)} with kernel {(kh, kw)}, dilation {(dh, dw)}, "
                         f"padding {(ph, pw)}, stride {(sh, sw)}: expected (N, C * {kh * kw}, {max(out[0], 0) * max(out[1], 0)}) "
                         "or its unbatched form")
    return {"blocks": (n, c, kh * kw, length), "block": (n, c, 1, length), "patch": (n, c, *out),
            "padded": (n, c, h + 2 * ph, w + 2 * pw), "output": (n, c, h, w), "result": (*batch, c, h, w)}[part]


def fold(x: Any, output_size: Any, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> LoweredOp:
    """``F.fold`` (col2im, unfold's adjoint): per kernel position (i, j) its block placed into zeros of the padded
    output from (i * dilation, j * dilation), every stride (``slice_grad``), the blocks added in torch's order,
    the padding cut away."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _pairs(kernel_size, dilation, padding, stride)
    geometry = (output_size, kernel_size, dilation, padding, stride)
    blocks = reshape(x, Deferred(fold_shapes, (x, *geometry, "blocks")))
    total: Any = None
    for position in range(kh * kw):
        block = LoweredOp("slice", [blocks], {"begin": (0, 0, position, 0), "size": Deferred(fold_shapes, (x, *geometry, "block"))})
        patch = reshape(block, Deferred(fold_shapes, (x, *geometry, "patch")))
        placed = LoweredOp("slice_grad", [patch], {"begin": (0, 0, position // kw * dh, position % kw * dw), "step": (1, 1, sh, sw),
                                                   "input_size": Deferred(fold_shapes, (x, *geometry, "padded"))})
        total = placed if total is None else LoweredOp("add", [total, placed], {})
    if (ph, pw) != (0, 0):
        total = LoweredOp("slice", [total], {"begin": (0, 0, ph, pw), "size": Deferred(fold_shapes, (x, *geometry, "output"))})
    return reshape(total, Deferred(fold_shapes, (x, *geometry, "result")))


def unflattened_shape(array: Any, dim: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    shape = list(array.shape)
    d = _dim(dim, len(shape))
    return tuple(shape[:d] + list(sizes) + shape[d + 1 :])


def chunk_sections(array: Any, chunks: int, dim: int) -> tuple[int, ...]:
    """torch.chunk's parts: each ceil(n / chunks) long, the last one shorter (so maybe fewer parts)."""
    n = size_along(array, dim)
    if n == 0 or chunks < 1:
        raise ValueError(f"chunk of a dimension of size {n} into {chunks} parts")
    return split_sections(array, math.ceil(n / chunks), dim)


def split_sections(array: Any, size: int, dim: int) -> tuple[int, ...]:
    """torch.split's parts of ``size`` each (the last one shorter)."""
    n = size_along(array, dim)
    if size < 1 or n == 0:
        raise ValueError(f"split of a dimension of size {n} into parts of {size}")
    return (size,) * (n // size) + ((n % size,) if n % size else ())


def part_number(sections: Any, index: int) -> int:
    """The item ``index`` of a split into ``sections`` (their sizes, or their count), a negative one counted
    from the end as Python counts it."""
    count = sections if isinstance(sections, int) else len(sections)
    if not -count <= index < count:
        raise IndexError(f"item {index} of a split into {count} parts")
    return index % count


def _part(sections: Any, index: int) -> Any:
    """``index`` as the split op's attribute: computed when planning where it counts from the end."""
    if index >= 0:
        return index
    return part_number(sections, index) if isinstance(sections, (int, tuple)) else Deferred(part_number, (sections, index))


def torch_pads(pad: Any) -> tuple[tuple[int, int], ...]:
    """F.pad's flat (last dimension first) list as (before, after) pairs from the first padded dimension."""
    if len(pad) % 2:
        raise ValueError(f"F.pad's pad must have an even length, got {tuple(pad)}")
    pairs = [(int(pad[i]), int(pad[i + 1])) for i in range(0, len(pad), 2)]
    return tuple(reversed(pairs))


def grouped_shape(array: Any, groups: int) -> tuple[int, ...]:
    """Channel shuffle's first view: (N, groups, C / groups, ...)."""
    n, channels, *rest = array.shape
    if channels % groups:
        raise ValueError(f"channel shuffle of {channels} channels into {groups} groups")
    return (n, groups, channels // groups, *rest)


def shuffle_perm(array: Any) -> tuple[int, ...]:
    """Channel shuffle's transpose of the two group axes of the grouped (rank + 1)-D view."""
    return (0, 2, 1, *range(3, len(array.shape) + 1))


def _index_spread(index: tuple[Any, ...], rank: int) -> list[tuple[Any, ...]]:
    """The entries of an index with the Ellipsis (or the missing tail) as full slices."""
    used = sum(e[0] in ("int", "slice") for e in index)
    if used > rank:
        raise IndexError(f"{used} indices into a {rank}-D array")
    full = [("slice", None, None)] * (rank - used)
    at = next((k for k, e in enumerate(index) if e[0] == "..."), len(index))
    return [*index[:at], *full, *(e for e in index[at:] if e[0] != "...")]


def _index_parts(array: Any, index: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
    """(begin, size, step) of the elements an index selects, and the shape of the result."""
    shape, begin, size, step, out = tuple(array.shape), [], [], [], []
    d = 0
    for entry in _index_spread(index, len(shape)):
        if entry[0] == "new":
            out.append(1)
            continue
        n = int(shape[d])
        if entry[0] == "int":
            if not -n <= entry[1] < n:
                raise IndexError(f"index {entry[1]} out of range for dimension {d} of size {n}")
            begin.append(entry[1] % n)
            size.append(1)
            step.append(1)
        else:
            taken = range(*slice(*entry[1:]).indices(n))
            begin.append(taken.start)
            size.append(len(taken))
            step.append(taken.step)
            out.append(size[-1])
        d += 1
    return tuple(begin), tuple(size), tuple(step), tuple(out)


def slice_begin(array: Any, index: tuple[Any, ...]) -> tuple[int, ...]:
    return _index_parts(array, index)[0]


def slice_size(array: Any, index: tuple[Any, ...]) -> tuple[int, ...]:
    return _index_parts(array, index)[1]


def slice_step(array: Any, index: tuple[Any, ...]) -> tuple[int, ...]:
    return _index_parts(array, index)[2]


def indexed_shape(array: Any, index: tuple[Any, ...]) -> tuple[int, ...]:
    return _index_parts(array, index)[3]


# ---------------------------------------------------------------------------- rules


def reshape(x: Any, shape: Any) -> LoweredOp:
    return LoweredOp("reshape", [x], {"shape": tuple(shape) if isinstance(shape, list) else shape})


def transpose(x: Any, perm: Any) -> LoweredOp:
    return LoweredOp("transpose", [x], {"perm": perm})


def permutation(x: Any, dims: Any) -> LoweredOp:
    """``transpose`` by ``dims`` (torch's permute): as given when it is literal and non-negative."""
    literal = isinstance(dims, (tuple, list)) and all(isinstance(d, int) and d >= 0 for d in dims)
    return transpose(x, tuple(dims) if literal else Deferred(normalized_perm, (x, dims)))


def _view(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.view(a, b)``, ``x.view((a, b))``, ``x.view(shape)``, ``x.reshape(...)``: sizes may be computed in forward."""
    x, rest = node.args[0], node.args[1:]
    shape = node.kwargs.get("shape", node.kwargs.get("size"))
    shape = sizes_argument(tuple(rest)) if shape is None else shape
    if isinstance(shape, torch.dtype):
        raise Unsupported("Tensor.view(dtype) reinterprets the bytes; no registry op does that")
    return reshape(x, shape)


def _reshape(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "shape"), node)
    return reshape(bound["input"], bound["shape"])


def _like(op: str) -> Handler:
    """``x.view_as(y)``, ``x.reshape_as(y)``, ``x.expand_as(y)``: the shape of the other tensor."""

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(signature("self", "other"), node)
        return LoweredOp(op, [bound["self"]], {"shape": Deferred(shape_of, (bound["other"],))})

    return handler


def _permute(lw: Lowerer, node: fx.Node) -> Lowered:
    if node.op == "call_method":
        bound = lw.bind(varargs("dims", "self"), node)
        return permutation(bound["self"], sizes_argument(bound["dims"]))
    bound = lw.bind(signature("input", "dims"), node)
    return permutation(bound["input"], bound["dims"])


def _transpose(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "dim0", "dim1"), node)
    return transpose(bound["input"], Deferred(swapped_perm, (bound["input"], bound["dim0"], bound["dim1"])))


def tensor_attribute(lw: Lowerer, obj: Any, name: str) -> Lowered:
    """``x.T`` (every axis reversed) and ``x.mT`` (the last two swapped)."""
    if name == "T":
        return transpose(obj, None)
    if name == "mT":
        return transpose(obj, Deferred(swapped_perm, (obj, -2, -1)))
    raise Unsupported(f"tensor attribute {name!r} has no registry op")


def _shaped(function: Any, *names: str, **defaults: Any) -> Handler:
    """A reshape whose shape ``function`` computes from the input and the other arguments."""
    sig = signature("input", *names, **defaults)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        x = bound.pop("input")
        return reshape(x, Deferred(function, (x, *bound.values())))

    return handler


def _expand(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(varargs("sizes", "self", implicit=False), node)
    x, sizes = bound["self"], sizes_argument(bound["sizes"])
    return LoweredOp("broadcast_to", [x], {"shape": Deferred(expanded_shape, (x, sizes))})


def _cat(axis_name: str) -> Handler:
    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(signature("tensors", **{axis_name: 0}), node)
        tensors = bound["tensors"]
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise Unsupported("concatenating something other than a list of tensors")
        axis = bound[axis_name]
        if lw.sizes_fixed and isinstance(axis, int):  # pieces empty along the axis add nothing (a rotary embedding's rest)
            kept = [t for t in tensors if (shape := lw.shape(t)) is None or shape[axis] != 0]
            tensors = kept if kept else tensors[:1]
            if len(tensors) == 1:
                return Alias(tensors[0])
        return LoweredOp("concat", list(tensors), {"axis": axis})

    return handler


def _part_bounds(size: int, start: Any, end: Any, part: str) -> tuple[int, int]:
    """(start, length) along the scattered dimension of the part before (``part`` "before") or after the window."""
    first, last, _ = slice(start, end).indices(size)
    last = max(last, first)
    return (0, first) if part == "before" else (last, size - last)


def scatter_window(array: Any, dim: int, start: Any, end: Any, part: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin, size) of the part of ``array`` before or after a ``slice_scatter`` window."""
    d = _dim(dim, len(array.shape))
    begin, size = [0] * len(array.shape), [int(n) for n in array.shape]
    begin[d], size[d] = _part_bounds(size[d], start, end, part)
    return tuple(begin), tuple(size)


def _window_part(array: Any, dim: int, start: Any, end: Any, part: str, which: int) -> tuple[int, ...]:
    return scatter_window(array, dim, start, end, part)[which]


def _slice_scatter(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.slice_scatter(x, src, dim, start, end)`` (torch.export's functional form of ``x[:, a:b] = src``):
    the parts of ``x`` before and after the window, joined with ``src`` (with torch.export's fixed sizes, an
    empty part is left out)."""
    bound = lw.bind(signature("input", "src", dim=0, start=None, end=None, step=1), node)
    x, src, dim, start, end = bound["input"], bound["src"], bound["dim"], bound["start"], bound["end"]
    shape = lw.shape(x)
    if bound["step"] != 1 or not isinstance(dim, int) or shape is None:
        raise Unsupported("slice_scatter is lowered with step 1, a literal dim and a known input shape")

    def part(which: str) -> Any:
        if lw.sizes_fixed and _part_bounds(shape[dim % len(shape)], start, end, which)[1] == 0:
            return None
        window = [Deferred(_window_part, (x, dim, start, end, which, i)) for i in (0, 1)]
        return LoweredOp("slice", [x], {"begin": window[0], "size": window[1]})

    pieces = [p for p in (part("before"), src, part("after")) if p is not None]
    return Alias(src) if len(pieces) == 1 else LoweredOp("concat", pieces, {"axis": dim})


def _stack(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("tensors", dim=0), node)
    tensors, dim = bound["tensors"], bound["dim"]
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise Unsupported("stacking something other than a list of tensors")
    return LoweredOp("concat", [reshape(t, Deferred(unsqueezed_shape, (t, dim))) for t in tensors], {"axis": dim})


def _repeat_interleave(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.repeat_interleave(n, dim)`` for a number ``n`` (gcvit): each element ``n`` times along ``dim`` as a
    new axis after it broadcast to ``n``, merged back (dim None: of the flattened input)."""
    bound = lw.bind(signature("input", repeats=None, dim=None, output_size=None), node)
    x, repeats, dim = bound["input"], bound["repeats"], bound["dim"]
    if repeats is None or not lw.is_python(repeats) or isinstance(repeats, bool):
        raise Unsupported("repeat_interleave with repeats given as a tensor (each element its own count: a gather); "
                          "only a number of repeats is lowered")
    if dim is None:
        x, dim = reshape(x, (-1,)), 0
    spread = LoweredOp("broadcast_to", [reshape(x, Deferred(spread_shape, (x, dim, 1)))],
                       {"shape": Deferred(spread_shape, (x, dim, repeats))})
    return reshape(spread, Deferred(interleaved_shape, (x, dim, repeats)))


def _roll(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.roll(x, shifts, dims)``: per dimension, the input concatenated to itself and the n elements from
    n - shift mod n on (every shift, 0 included, the same two ops); dims None: of the flattened input."""
    bound = lw.bind(signature("input", "shifts", dims=None), node)
    x, shifts, dims = bound["input"], bound["shifts"], bound["dims"]
    shifts, dims = (s if isinstance(s, (tuple, list)) else (s,) for s in (shifts, dims if dims is not None else 0))
    if len(shifts) != len(dims):
        raise Unsupported(f"roll with {len(shifts)} shifts over {len(dims)} dims")
    value = reshape(x, (-1,)) if bound["dims"] is None else x
    for shift, dim in zip(shifts, dims):
        doubled = LoweredOp("concat", [value, value], {"axis": dim})
        value = LoweredOp("slice", [doubled], {"begin": Deferred(rolled_window, (value, shift, dim)), "size": Deferred(shape_of, (value,))})
    return value if bound["dims"] is not None else reshape(value, Deferred(shape_of, (x,)))


def _repeat(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.repeat(a, b, ...)`` (a tiling): a unit axis before each axis, broadcast to the repeats, merged."""
    bound = lw.bind(varargs("repeats", "self"), node)
    x, repeats = bound["self"], sizes_argument(bound["repeats"])
    unit = reshape(x, Deferred(tiled_shape, (x, repeats, 0)))
    spread = LoweredOp("broadcast_to", [unit], {"shape": Deferred(tiled_shape, (x, repeats, 1))})
    return reshape(spread, Deferred(tiled_shape, (x, repeats, 2)))


def parts(lw: Lowerer, node: fx.Node, part: Any, fields: tuple[str, ...] = ()) -> Parts:
    """A tuple-valued node whose i-th item is ``part(i)`` (made once per item); ``fields``: its items' names."""
    lw.check_users_index(node, fields)
    made: dict[int, Lowered] = {}
    return Parts(lambda i: made[i] if i in made else made.setdefault(i, part(i)), fields)


def _chunk(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "chunks", dim=0), node)
    x, dim = bound["input"], bound["dim"]
    sections = Deferred(chunk_sections, (x, bound["chunks"], dim))
    return parts(lw, node, lambda i: LoweredOp("split", [x], {"sections": sections, "index": _part(sections, i), "axis": dim}))


def _split(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "split_size_or_sections", dim=0), node)
    x, dim, size = bound["input"], bound["dim"], bound["split_size_or_sections"]
    sections = tuple(size) if isinstance(size, (list, tuple)) else Deferred(split_sections, (x, size, dim))
    return parts(lw, node, lambda i: LoweredOp("split", [x], {"sections": sections, "index": _part(sections, i), "axis": dim}))


def _unbind(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", dim=0), node)
    x, dim = bound["input"], bound["dim"]
    count, shape = Deferred(size_along, (x, dim)), Deferred(without_dim, (x, dim))
    return parts(lw, node, lambda i: reshape(LoweredOp("split", [x], {"sections": count, "index": _part(count, i), "axis": dim}), shape))


def _index_entries(lw: Lowerer, index: Any) -> tuple[tuple[Any, ...], ...]:
    entries: list[tuple[Any, ...]] = []
    for item in index if isinstance(index, tuple) else (index,):
        if item is None:
            entries.append(("new",))
        elif item is Ellipsis:
            entries.append(("...",))
        elif isinstance(item, slice):
            if isinstance(item.step, int) and item.step < 1:
                raise Unsupported(f"slicing with step {item.step!r} (torch refuses steps below 1)")
            entries.append(("slice", item.start, item.stop, item.step))
        elif isinstance(item, int) and not isinstance(item, bool) or isinstance(item, fx.Node) and lw.is_python(item):
            entries.append(("int", item))
        elif (picked := _constant_indices(lw, item)) is not None:
            entries.append(("take", picked))
        else:
            raise Unsupported(f"indexing a tensor with {type(item).__name__} values (a gather) has no registry op")
    return tuple(entries)


def _constant_indices(lw: Lowerer, item: Any) -> torch.Tensor | None:
    """An index that picks elements along one axis by indices known now (a list of ints, a 1-D integer weight),
    as an int64 tensor; None for other indices. Negative indices are refused (they count from an end that
    other input shapes move)."""
    value = lw.constants.get(item, item) if isinstance(item, fx.Node) else item
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = torch.tensor(value)
    if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int32, torch.int64) or value.dim() != 1 or not len(value):
        return None
    if bool((value < 0).any()):
        raise Unsupported("indexing a tensor with negative indices (a gather; only indices >= 0 are lowered)")
    return value.to(torch.int64)


def axis_first(array: Any, axis: int) -> tuple[int, ...]:
    """The permutation moving ``axis`` to the front (``axis_back`` moves it back)."""
    axis = _dim(axis, len(array.shape))
    rest = [d for d in range(len(array.shape)) if d != axis]
    return (axis, *rest)


def axis_back(array: Any, axis: int) -> tuple[int, ...]:
    """The permutation moving the front axis back to ``axis``."""
    axis = _dim(axis, len(array.shape))
    return tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, len(array.shape)))


def rows_of(array: Any, axis: int) -> tuple[int, ...]:
    """The input with ``axis`` in front, as (its size, everything else)."""
    n = size_along(array, axis)
    return (n, numel_of(array) // n if n else 0)


def picked_shape(array: Any, axis: int, count: int) -> tuple[int, ...]:
    return (count, *without_dim(array, axis))


def take(x: Any, axis: int, indices: torch.Tensor) -> LoweredOp:
    """``x[:, ..., indices]`` along ``axis`` (indices known now): the axis moved to the front, the rest
    flattened into rows of an ``embedding`` table, the picked rows shaped and moved back."""
    table = reshape(transpose(x, Deferred(axis_first, (x, axis))), Deferred(rows_of, (x, axis)))
    picked = reshape(LoweredOp("embedding", [table, indices], {}), Deferred(picked_shape, (x, axis, len(indices))))
    return transpose(picked, Deferred(axis_back, (x, axis)))


def _taken(entries: tuple[tuple[Any, ...], ...]) -> tuple[int, torch.Tensor] | None:
    """(axis, indices) of an index that picks along one axis by constant indices, the others whole (the axis
    counted from the end after an Ellipsis); None if it picks nothing; unsupported for other mixtures."""
    at = [k for k, e in enumerate(entries) if e[0] == "take"]
    if not at:
        return None
    others = [e for k, e in enumerate(entries) if k != at[0]]
    if len(at) > 1 or not all(e[0] == "..." or e[0] == "slice" and e[1:] in ((None, None, None), (None, None, 1)) for e in others):
        raise Unsupported("indexing with a list or tensor of indices beside other indices (a gather; only x[:, ..., indices] "
                          "along one axis, the others whole, is lowered)")
    before, after = entries[: at[0]], entries[at[0] + 1 :]
    axis = -1 - sum(e[0] != "..." for e in after) if any(e[0] == "..." for e in before) else len(before)
    return axis, entries[at[0]][1]


def tensor_index(lw: Lowerer, x: Any, index: Any) -> Lowered:
    """``x[...]`` with ints, slices, None and Ellipsis: a slice, then a reshape for ints and Nones; along one axis
    by indices known now: ``take``."""
    entries = _index_entries(lw, index)
    taken = _taken(entries)
    if taken is not None:
        return take(x, *taken)
    strided = any(e[0] == "slice" and e[3] not in (None, 1) for e in entries)
    cuts = strided or any(e[0] == "int" or e[0] == "slice" and (e[1], e[2]) != (None, None) for e in entries)
    reshapes = any(e[0] in ("int", "new") for e in entries)
    value: Any = x
    if cuts:
        bounds = {"begin": Deferred(slice_begin, (x, entries)), "size": Deferred(slice_size, (x, entries))}
        value = LoweredOp("slice", [x], {**bounds, "step": Deferred(slice_step, (x, entries))} if strided else bounds)
    if reshapes:
        value = reshape(value, Deferred(indexed_shape, (x, entries)))
    return value if isinstance(value, LoweredOp) else Alias(x)


def _getitem(lw: Lowerer, node: fx.Node) -> Lowered:
    lowered = python_getitem(lw, node)
    return lowered if lowered is not None else tensor_index(lw, node.args[0], node.args[1])


def pad(x: Any, pads: Any, mode: str = "constant", value: Any = None) -> LoweredOp:
    """F.pad's arguments as a ``pad`` op (its modes: constant, reflect, replicate); negative pads of constant
    padding (PNASNet's crop, ``(-1, 1, -1, 1)``) cut first, with a slice."""
    if mode not in ("constant", "reflect", "replicate"):
        raise Unsupported(f"padding mode {mode!r} (the pad op has constant, reflect and replicate)")
    if mode == "constant" and isinstance(pads, (list, tuple)) and any(isinstance(p, int) and p < 0 for p in pads):
        window = {"begin": Deferred(cropped_begin, (x, tuple(pads))), "size": Deferred(cropped_size, (x, tuple(pads)))}
        x, pads = LoweredOp("slice", [x], window), tuple(max(p, 0) for p in pads)
    return LoweredOp("pad", [x], {"pads": deferred(torch_pads, pads), "mode": mode, "value": 0.0 if value is None else value})


def _cuts(array: Any, pad: tuple[int, ...]) -> list[tuple[int, int]]:
    """What F.pad's negative entries cut from each dimension: (from the start, from the end)."""
    cuts = [(0, 0)] * len(array.shape)
    for index, (before, after) in enumerate(reversed(torch_pads(pad))):
        cuts[len(cuts) - 1 - index] = (max(-before, 0), max(-after, 0))
    return cuts


def cropped_begin(array: Any, pad: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(start for start, _ in _cuts(array, pad))


def cropped_size(array: Any, pad: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(size) - start - end for size, (start, end) in zip(array.shape, _cuts(array, pad)))


def _unfold(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "kernel_size", dilation=1, padding=0, stride=1), node)
    return unfold(bound["input"], bound["kernel_size"], bound["dilation"], bound["padding"], bound["stride"])


def _fold(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "output_size", "kernel_size", dilation=1, padding=0, stride=1), node)
    if not all(isinstance(k, int) for name in ("kernel_size", "dilation", "padding", "stride") for k in _flat(bound[name])):
        raise Unsupported("F.fold with a kernel size, dilation, padding or stride computed in the model (numbers are lowered)")
    return fold(bound["input"], bound["output_size"], bound["kernel_size"], bound["dilation"], bound["padding"], bound["stride"])


def _flat(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _windows(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "dimension", "size", "step"), node)
    dim, size, step = bound["dimension"], bound["size"], bound["step"]
    if not all(isinstance(v, int) for v in (dim, size, step)):
        raise Unsupported("Tensor.unfold with a dimension, size or step computed in the model (numbers are lowered)")
    return windows(bound["input"], dim, size, step)


def _pad(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "pad", mode="constant", value=None), node)
    return pad(bound["input"], bound["pad"], bound["mode"], bound["value"])


def channel_shuffle(x: Any, groups: Any) -> LoweredOp:
    """(N, C, ...) viewed as (N, groups, C / groups, ...), its group axes swapped, viewed back."""
    grouped = reshape(x, Deferred(grouped_shape, (x, groups)))
    return reshape(transpose(grouped, Deferred(shuffle_perm, (x,))), Deferred(shape_of, (x,)))


def _channel_shuffle(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "groups"), node)
    return channel_shuffle(bound["input"], bound["groups"])


_FLATTEN_SIG = signature("input", start_dim=0, end_dim=-1)


def _flatten(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(_FLATTEN_SIG, node)
    return LoweredOp("flatten", [bound.pop("input")], bound)


_UNSQUEEZE = _shaped(unsqueezed_shape, "dim")
_SQUEEZE = _shaped(squeezed_shape, dim=None)
_UNFLATTEN = _shaped(unflattened_shape, "dim", "sizes")

FUNCTIONS: dict[Any, Handler] = {
    torch.flatten: _flatten, torch.reshape: _reshape,
    torch.permute: _permute, torch.transpose: _transpose, torch.swapaxes: _transpose, torch.swapdims: _transpose,
    torch.unsqueeze: _UNSQUEEZE, torch.squeeze: _SQUEEZE, torch.unflatten: _UNFLATTEN,
    torch.cat: _cat("dim"), torch.concat: _cat("dim"), torch.concatenate: _cat("axis"), torch.stack: _stack,
    torch.chunk: _chunk, torch.split: _split, torch.unbind: _unbind, torch.repeat_interleave: _repeat_interleave,
    torch.roll: _roll, torch.slice_scatter: _slice_scatter,
    F.pad: _pad, F.unfold: _unfold, F.fold: _fold, F.channel_shuffle: _channel_shuffle, torch.channel_shuffle: _channel_shuffle,
    torch.native_channel_shuffle: _channel_shuffle,
    operator.getitem: _getitem,
}  # fmt: skip

METHODS: dict[str, Handler] = {
    "flatten": _flatten, "view": _view, "reshape": _view, "view_as": _like("reshape"), "reshape_as": _like("reshape"),
    "permute": _permute, "transpose": _transpose, "swapaxes": _transpose, "swapdims": _transpose,
    "t": lambda lw, node: transpose(node.args[0], None),
    "unsqueeze": _UNSQUEEZE, "squeeze": _SQUEEZE, "unflatten": _UNFLATTEN,
    "expand": _expand, "expand_as": _like("broadcast_to"), "repeat_interleave": _repeat_interleave,
    "repeat": _repeat, "roll": _roll,
    "chunk": _chunk, "split": _split, "unbind": _unbind, "unfold": _windows,
}  # fmt: skip
