"""Pipelines of executor programs: an executor graph as a torch module, which torch.distributed.pipelining
schedules as any stage (GPipe, 1F1B, interleaved schedules, ...).

Why this rather than send/recv nodes and a schedule of our own: the schedules, their micro-batching, the
point-to-point transfers between stages and the loss and gradient scaling are torch's, maintained and
tested there, and a pipeline may mix stages run by the executor with plain torch ones. The module's forward
runs the graph; its backward runs the graph's gradient ops (the op specs' rules), recomputing the forward
first (what activation checkpointing does: the stage keeps no activations between the two passes). Its
parameters are torch Parameters sharing the graph's parameter arrays: a torch optimizer updates the graph.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
import torch

from ..graph import Executor, Node, gradients, op, parameters_of, placeholder


class ProgramModule(torch.nn.Module):
    """The graph from the placeholders ``inputs`` to ``output`` as a torch module: ``module(*tensors)`` runs it
    on CPU tensors of the placeholders' shapes and dtypes (in a pipeline: one micro-batch), and autograd gets
    the gradients of the inputs and of ``params`` (default: every parameter ``output`` depends on) from the
    graph's gradient ops. ``executor_options`` go to the ``Executor`` (``algorithm=``, ``backends=``)."""

    def __init__(self, inputs: Sequence[Node], output: Node, params: Sequence[Node] | None = None,
                 **executor_options: Any) -> None:
        super().__init__()
        self.inputs = list(inputs)
        self.output = output
        self.params = list(params) if params is not None else parameters_of([output])
        self.grad_output = placeholder(f"{output.name}_grad_output", output.shape, output.dtype)
        surrogate = op("reduce_sum", op("mul", output, self.grad_output))  # its gradients: the vector-Jacobian products
        grads = gradients(surrogate, [*self.inputs, *self.params])
        self.executor = Executor({"forward": [output], "backward": grads}, **executor_options)
        self.names = [_attribute(p.name) for p in self.params]
        for name, param in zip(self.names, self.params):
            self.register_parameter(name, torch.nn.Parameter(torch.from_numpy(param.value)))

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        if len(tensors) != len(self.inputs):
            raise TypeError(f"ProgramModule takes {len(self.inputs)} tensors ({', '.join(n.name for n in self.inputs)}); got {len(tensors)}")
        result: torch.Tensor = _Program.apply(self, *tensors, *(getattr(self, name) for name in self.names))  # type: ignore[no-untyped-call]
        return result


class _Program(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, module: ProgramModule, *tensors: torch.Tensor) -> torch.Tensor:
        inputs = tensors[:len(module.inputs)]
        ctx.module = module
        ctx.save_for_backward(*inputs)
        out = module.executor.run("forward", _feed(module.inputs, inputs))[0]
        return torch.from_numpy(np.array(out))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        module: ProgramModule = ctx.module
        feed = _feed(module.inputs, ctx.saved_tensors)
        feed[module.grad_output] = _array(grad)
        grads = module.executor.run("backward", feed)
        return (None, *(torch.from_numpy(np.array(g)) for g in grads))


def _feed(nodes: Sequence[Node], tensors: Sequence[torch.Tensor]) -> dict[Any, Any]:
    return {node: _array(t) for node, t in zip(nodes, tensors)}


def _array(tensor: torch.Tensor) -> np.ndarray:
    array: np.ndarray = tensor.detach().cpu().contiguous().numpy()
    return array


def _attribute(name: str) -> str:
    """A parameter's name as a torch attribute name (dots and other punctuation become underscores)."""
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"p_{cleaned}"
