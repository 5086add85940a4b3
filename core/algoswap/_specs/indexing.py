"""Ops driven by integer indices or boolean masks: one_hot, where, and embedding lookup with its
dense gradient.

The sparse gradient of embedding with respect to its weight is the pair (indices, grad_output):
row grad_output[i...] belongs to weight row indices[i...] (repeats add up). No op computes it; the
sparse optimizer updates (optim.py) take the pair as it is, and embedding_grad densifies it.
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpSpec, Shape
from ._convert import choice, integer
from ._dtypes import typed
from ._geometry import ANY_RANK

LIFTED_RANK = ANY_RANK[:-1]  # inputs whose output has one more dimension

# ---------------------------------------------------------------------------------- one_hot

one_hot = OpSpec(
    "one_hot", (Input("indices", LIFTED_RANK),),
    (
        Attr("num_classes", convert=integer(1), doc="the length of each one-hot vector"),
        Attr("dtype", "float32", choice("float16", "float32", "float64"), "the output dtype"),
    ),
    shape_rule=lambda shapes, attrs: shapes["indices"] + (attrs["num_classes"],),
    dtype_rule=typed(ints=("indices",)), out_dtype=lambda dtype, attrs: str(attrs["dtype"]), family="indexing",
    doc="out[..., c] = 1 where indices[...] == c, else 0, in the given dtype (indices outside "
    "[0, num_classes) are an error when the op runs).",
)

# ------------------------------------------------------------------------------------ where


def _where_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    first = shapes["condition"]
    for name in ("x", "y"):
        if shapes[name] != first:
            raise InvalidSpec(name, f"shape {shapes[name]}", f"shape {first} like 'condition'")
    return first


def _where_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    if shapes["grad_output"] != shapes["condition"]:
        raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"shape {shapes['condition']} like 'condition'")
    return shapes["condition"]


where = OpSpec(
    "where", (Input("condition"), Input("x"), Input("y")), (),
    shape_rule=_where_shape, dtype_rule=typed(bools=("condition",)), family="indexing",
    gradients=(
        GradRule("x", "where_grad", ("grad_output", "condition"), lambda c: {"branch": "x"}),
        GradRule("y", "where_grad", ("grad_output", "condition"), lambda c: {"branch": "y"}),
    ),
    doc="x where condition (bool) is True, else y; the three arrays share one shape.",
)
where_grad = OpSpec(
    "where_grad", (Input("grad_output"), Input("condition")),
    (Attr("branch", convert=choice("x", "y"), doc="which input the gradient is for"),),
    shape_rule=_where_grad_shape, dtype_rule=typed(bools=("condition",)), family="indexing", grad_of="where",
    doc="Gradient of where: grad_output where condition selects the branch, else 0.",
)

# -------------------------------------------------------------------------------- embedding


def _embedding_grad_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    dy, indices = shapes["grad_output"], shapes["indices"]
    if dy[:-1] != indices:
        raise InvalidSpec("grad_output", f"shape {dy}", f"{indices + ('D',)}: the shape of 'indices' and the embedding size")
    return (attrs["num_embeddings"], dy[-1])


embedding = OpSpec(
    "embedding", (Input("weight", (2,)), Input("indices", LIFTED_RANK)), (),
    shape_rule=lambda shapes, attrs: shapes["indices"] + (shapes["weight"][1],),
    dtype_rule=typed(ints=("indices",)), family="indexing",
    gradients=(
        GradRule("weight", "embedding_grad", ("grad_output", "indices"), lambda c: {"num_embeddings": (c.shape("weight") or (0,))[0]}),
    ),
    doc="Rows of weight (num_embeddings, D) picked by integer indices, like torch.nn.functional.embedding "
    "(indices outside [0, num_embeddings) are an error when the op runs). Its sparse gradient is (indices, grad_output).",
)
embedding_grad = OpSpec(
    "embedding_grad", (Input("grad_output", tuple(r + 1 for r in LIFTED_RANK)), Input("indices", LIFTED_RANK)),
    (Attr("num_embeddings", convert=integer(1), doc="rows of the embedding table"),),
    shape_rule=_embedding_grad_shape, dtype_rule=typed(ints=("indices",)), family="indexing", grad_of="embedding",
    empty_fill=0.0,  # no index: no row gets a gradient
    doc="Dense gradient of embedding with respect to its weight: each grad_output row added to the row its index names.",
)

SPECS = (one_hot, where, where_grad, embedding, embedding_grad)
