"""The pointwise tail of a fused forward convolution graph (cuDNN frontend nodes after the convolution, computed in
float32): + bias[c], + residual, then the activation. relu, relu6 (relu clipped to [0, 6]), silu (swish, beta 1)
and gelu are one cuDNN pointwise mode each; hardswish, which has none, is composed of four:
x * relu6(x + 3) / 6 (add, relu clipped, mul, div; the constants are the graph's own scalars, passed by value)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import cudnn

Shape = tuple[int, ...]
# conv2d_fused's activations that are one cuDNN pointwise node: (frontend method, its arguments)
GRAPH_ACTIVATIONS: dict[str, tuple[str, dict[str, float]]] = {
    "relu": ("relu", {}), "relu6": ("relu", {"lower_clip": 0.0, "upper_clip": 6.0}), "silu": ("swish", {"swish_beta": 1.0}),
    "gelu": ("gelu", {}),
}
COMPOSED = ("hardswish",)  # activations a graph computes with several pointwise nodes


@dataclass(frozen=True)
class Epilogue:
    """What a forward graph computes after the convolution, in float32: + bias[c], + residual, activation."""

    bias: bool
    residual: bool
    activation: str

    @property
    def words(self) -> str:
        parts = ["bias"] * self.bias + ["residual"] * self.residual + [self.activation] * (self.activation != "none")
        return " + ".join(parts)


def in_graph(activation: str) -> bool:
    """Whether a fused graph computes ``activation`` ("none" included)."""
    return activation == "none" or activation in GRAPH_ACTIVATIONS or activation in COMPOSED


def _hardswish(graph: Any, x: Any, compute: Any) -> Any:
    three, six = (graph.tensor_scalar(value, cudnn.scalar_type.RUNTIME_PARAM) for value in (3.0, 6.0))
    gate = graph.relu(input=graph.add(a=x, b=three, compute_data_type=compute), lower_clip=0.0, upper_clip=6.0,
                      compute_data_type=compute)
    return graph.div(a=graph.mul(a=x, b=gate, compute_data_type=compute), b=six, compute_data_type=compute)


def nodes(graph: Any, e: Epilogue | None, out: Any, channels: int, dtype: Any, tensor: Callable[[str], Any],
          compute: Any) -> tuple[Any, list[Any]]:
    """The pointwise nodes of ``e`` after the convolution's output ``out`` (``channels`` of them), and the tensors they
    read (the bias, (1, C, 1, 1) of ``dtype``; the residual, ``tensor("r")``, laid out as the output)."""
    if e is None:
        return out, []
    extra = []
    if e.bias:
        bias = graph.tensor(name="b", dim=[1, channels, 1, 1], stride=[channels, 1, 1, 1], data_type=dtype)
        out = graph.bias(input=out, bias=bias, compute_data_type=compute)
        extra.append(bias)
    if e.residual:
        residual = tensor("r")
        out = graph.add(a=out, b=residual, compute_data_type=compute)
        extra.append(residual)
    if e.activation == "hardswish":
        out = _hardswish(graph, out, compute)
    elif e.activation != "none":
        method, arguments = GRAPH_ACTIVATIONS[e.activation]
        out = getattr(graph, method)(input=out, compute_data_type=compute, **arguments)
    return out, extra
