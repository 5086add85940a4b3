"""Optimizers: ``minimize(loss)`` differentiates the graph and adds one in-place update op per parameter.

An embedding table whose only gradient is the embedding's gets the sparse update (only the rows
looked up change), from the pair (indices, grad_output) instead of a dense gradient.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._autodiff import gradients
from ._node import Node, group, op, parameters_of, variable


class Optimizer:
    """The common part: hyper-parameters as op attributes, state as variables (zeros at first)."""

    update = "sgd"
    state: tuple[str, ...] = ()

    def __init__(self, lr: float, **hyper: Any) -> None:
        self.lr = lr
        self.hyper = hyper

    def minimize(self, loss: Node, params: Sequence[Node] | None = None, name: str | None = None) -> Node:
        """The update subgraph: a group node running one update per parameter (all of them by default)."""
        params = list(params) if params is not None else parameters_of([loss])
        return self.apply_gradients(params, gradients(loss, params), name=name)

    def apply_gradients(self, params: Sequence[Node], grads: Sequence[Node], name: str | None = None) -> Node:
        """A group node running one update per (parameter, gradient); an ``embedding_grad`` node stands for
        its sparse pair (only its inputs are read: the rows, then the indices)."""
        updates = [self._update(param, grad) for param, grad in zip(params, grads)]
        return group(updates, name=name or f"{type(self).__name__.lower()}_minimize")

    def _attrs(self) -> dict[str, Any]:
        return {"lr": self.lr, **self.hyper}

    def _update(self, param: Node, grad: Node) -> Node:
        state = tuple(variable(f"{param.name}_{s}", np.zeros(param.shape, param.dtype)) for s in self.state)
        label = f"update_{param.name}"
        if grad.op == "embedding_grad":
            rows, indices = grad.inputs[0], grad.inputs[1]
            node = op(f"{self.update}_update_sparse", param, indices, rows, *state, name=label, **self._attrs())
        else:
            node = op(f"{self.update}_update", param, grad, *state, name=label, **self._attrs())
        self._prepare(node)
        return node

    def _prepare(self, node: Node) -> None:
        """Hook for updates whose attributes change at every run (Adam's step count)."""


class SGD(Optimizer):
    """param -= lr * grad."""

    def __init__(self, lr: float = 0.01) -> None:
        super().__init__(lr)


class Momentum(Optimizer):
    """velocity = momentum * velocity + grad; param -= lr * velocity."""

    update = "momentum"
    state = ("velocity",)

    def __init__(self, lr: float = 0.01, momentum: float = 0.9) -> None:
        super().__init__(lr, momentum=momentum)


class Nesterov(Momentum):
    """Momentum with the Nesterov correction (torch.optim.SGD with nesterov=True)."""

    update = "nesterov"


class AdaGrad(Optimizer):
    """accumulator += grad**2; param -= lr * grad / (sqrt(accumulator) + eps)."""

    update = "adagrad"
    state = ("accumulator",)

    def __init__(self, lr: float = 0.01, eps: float = 1e-10) -> None:
        super().__init__(lr, eps=eps)


class Adam(Optimizer):
    """torch.optim.Adam's update; the step count advances each time the update runs."""

    update = "adam"
    state = ("m", "v")

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        super().__init__(lr, beta1=beta1, beta2=beta2, eps=eps)

    def _attrs(self) -> dict[str, Any]:
        return {**super()._attrs(), "step": 1}

    def _prepare(self, node: Node) -> None:
        node.dynamic = StepCount()


class StepCount:
    """An update's step count (Adam's), advanced each time the update runs; ``Executor.state_dict`` keeps it."""

    def __init__(self, step: int = 0) -> None:
        self.step = step

    def __call__(self) -> dict[str, Any]:
        self.step += 1
        return {"step": self.step}
