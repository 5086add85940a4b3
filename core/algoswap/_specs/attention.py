"""scaled_dot_product_attention (torch.nn.functional.scaled_dot_product_attention in eval: no dropout)
and its gradients with respect to query, key and value.

The computation every backend follows (torch's math path, ``_scaled_dot_product_attention_math``):
scores = scale * query @ key^T, plus the mask (a float mask is added; a bool mask adds -inf where it
is False; is_causal keeps key j <= query i, from the top left), then a softmax over the keys that gives
zeros, not NaN, to a row whose scores are all -inf (torch's ``_safe_softmax``: a fully masked query
attends to nothing), then output = weights @ value. NaN and infinities flow through as in those
products (a NaN score makes its row NaN; 0 * inf in the last product is NaN). Batch dimensions of
query, key and value broadcast as in NumPy. (torch 2.13 on the CPU runs 4-D inputs through its flash
kernel instead, which agrees on finite inputs and fully masked rows but drops some NaN: a NaN in a
query of width 2 gives that query zeros, not NaN; the math path is the definition torch documents.)
"""

from __future__ import annotations

import math
from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, GradRule, Input, OpCall, OpSpec, Shape
from ._convert import boolean, optional, real
from ._dtypes import typed
from ._geometry import ANY_RANK
from .elementwise import broadcast_shape

_FAMILY = "attention"
_RANKS = ANY_RANK[1:]  # 2-D to 8-D: (..., L, E)
_INPUTS = (
    Input("query", _RANKS, doc="(..., L, E)"), Input("key", _RANKS, doc="(..., S, E)"),
    Input("value", _RANKS, doc="(..., S, Ev)"),
    Input("attn_mask", optional=True, doc="bool (True: take part) or float (added), broadcastable to (..., L, S)"),
)
_ATTRS = (
    Attr("is_causal", False, boolean, "query i attends to keys j <= i only (no attn_mask then)"),
    Attr("scale", None, optional(real()), "the factor of query @ key^T (None: 1 / sqrt(E))"),
)
_DTYPES = typed(masks=("attn_mask",))


def _batch(shapes: dict[str, Any]) -> Shape:
    """The broadcast batch dimensions of query, key and value, after checking E and S agree."""
    q, k, v = shapes["query"], shapes["key"], shapes["value"]
    if k[-1] != q[-1]:
        raise InvalidSpec("key", f"shape {k}", f"last size {q[-1]}, the query's (E)")
    if v[-2] != k[-2]:
        raise InvalidSpec("value", f"shape {v}", f"size {k[-2]} along axis -2, the key's (S)")
    batch = q[:-2]
    for name in ("key", "value"):
        try:
            batch = broadcast_shape(batch, shapes[name][:-2])
        except InvalidSpec:
            raise InvalidSpec(name, f"shape {shapes[name]}", f"batch dimensions broadcastable with {batch}") from None
    return batch


def scores_shape(shapes: dict[str, Any]) -> Shape:
    """(..., L, S): the shape of query @ key^T, which attn_mask must broadcast to."""
    return _batch(shapes) + (shapes["query"][-2], shapes["key"][-2])


def _output_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    scores = scores_shape(shapes)
    mask = shapes["attn_mask"]
    if mask is not None:
        try:
            fits = broadcast_shape(scores, mask) == scores
        except InvalidSpec:
            fits = False
        if not fits:
            raise InvalidSpec("attn_mask", f"shape {mask}", f"a shape that broadcasts to the scores' {scores} (..., L, S)")
    return scores[:-1] + (shapes["value"][-1],)


def _resolve(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    if attrs["is_causal"] and shapes["attn_mask"] is not None:
        raise InvalidSpec("attn_mask", "an array", "None when is_causal=True (torch refuses both)")
    if attrs["scale"] is not None:
        return attrs
    width = shapes["query"][-1]
    return {**attrs, "scale": 1.0 / math.sqrt(width) if width else math.inf}


def _empty_fill(shapes: dict[str, Any], attrs: dict[str, Any]) -> float | None:
    """Zeros where no key exists (S = 0: every query attends to nothing) or no value column (Ev = 0: nothing
    flows back); nothing where E = 0 (every score 0 * inf: torch gives the mean of the values)."""
    return None if shapes["query"][-1] == 0 else 0.0


def _gradient_shape(wrt: str) -> Any:
    def rule(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
        expected = _output_shape(shapes, attrs)
        if shapes["grad_output"] != expected:
            raise InvalidSpec("grad_output", f"shape {shapes['grad_output']}", f"{expected}, the attention's output shape")
        shape: Shape = shapes[wrt]
        return shape

    return rule


def _forward_attrs(call: OpCall) -> dict[str, Any]:
    return dict(call.attrs)


_NAME = "scaled_dot_product_attention"
_GRAD_INPUTS = ("grad_output", "query", "key", "value", "attn_mask")

scaled_dot_product_attention = OpSpec(
    _NAME, _INPUTS, _ATTRS, shape_rule=_output_shape, resolve=_resolve, dtype_rule=_DTYPES, family=_FAMILY,
    empty_fill=_empty_fill,
    gradients=tuple(GradRule(wrt, f"{_NAME}_grad_{wrt}", _GRAD_INPUTS, _forward_attrs) for wrt in ("query", "key", "value")),
    doc="softmax(scale * query @ key^T + mask) @ value over the keys, like torch.nn.functional."
    "scaled_dot_product_attention without dropout; a query whose scores are all -inf (fully masked) gives zeros.",
)


def _gradient(wrt: str, doc: str) -> OpSpec:
    return OpSpec(
        f"{_NAME}_grad_{wrt}", (Input("grad_output", _RANKS),) + _INPUTS, _ATTRS, shape_rule=_gradient_shape(wrt),
        resolve=_resolve, dtype_rule=_DTYPES, family=_FAMILY, grad_of=_NAME, empty_fill=_empty_fill, doc=doc,
    )


# With P the attention weights, O = P @ value and dS = P * (dP - rowsum(dP * P)), dP = grad_output @ value^T:
scaled_dot_product_attention_grad_query = _gradient(
    "query", "Gradient of scaled_dot_product_attention for query: scale * dS @ key (summed over broadcast batch dimensions).")
scaled_dot_product_attention_grad_key = _gradient(
    "key", "Gradient of scaled_dot_product_attention for key: scale * dS^T @ query (summed over broadcast batch dimensions).")
scaled_dot_product_attention_grad_value = _gradient(
    "value", "Gradient of scaled_dot_product_attention for value: P^T @ grad_output (summed over broadcast batch dimensions).")



def attention_mask(mask: Any, is_causal: bool, length: int, keys: int, dtype: Any, xp: Any) -> Any:
    """The array added to the scores (None: nothing is): a float mask as it is, a bool one 0 where True and
    -inf where False; with is_causal, -inf above the diagonal of (length, keys) (query i sees keys j <= i).
    ``xp`` is the array module (numpy, cupy) and ``dtype`` the scores' dtype."""
    if is_causal:
        mask = xp.tril(xp.ones((length, keys), dtype=bool))
    if mask is None or mask.dtype != bool:
        return mask
    return xp.where(mask, xp.asarray(0, dtype=dtype), xp.asarray(-math.inf, dtype=dtype))


SPECS = (scaled_dot_product_attention, scaled_dot_product_attention_grad_query, scaled_dot_product_attention_grad_key,
         scaled_dot_product_attention_grad_value)
