"""Graphs, autodiff, optimizers and the executor.

    >>> import numpy as np
    >>> from algoswap import graph as g
    >>> x = g.placeholder("x", (4, 3))
    >>> w = g.parameter("w", np.ones((2, 3), np.float32))
    >>> loss = g.reduce_mean(g.relu(g.linear(x, w)))
    >>> train = g.SGD(lr=0.1).minimize(loss)
    >>> executor = g.Executor({"train": [loss, train]})
    >>> value, _ = executor.run("train", feed={x: np.ones((4, 3), np.float32)})

Every registered op is a function of this module (``g.conv2d(x, w, b, padding=1)``), and
``g.op("conv2d", x, w, b, padding=1)`` calls one by name.
"""

from __future__ import annotations

from typing import Any, Callable

from ._autodiff import gradients
from ._data import DataLoader, dataloader_op
from ._executor import Executor
from ._node import GraphError, Node, constant, group, op, parameter, parameters_of, placeholder, topological, variable
from ._optim import SGD, AdaGrad, Adam, Momentum, Nesterov, Optimizer
from ._program import MemoryReport, Program, Step

__all__ = [
    "AdaGrad", "Adam", "DataLoader", "Executor", "GraphError", "MemoryReport", "Momentum", "Nesterov", "Node",
    "Optimizer", "Program", "SGD", "Step", "constant", "dataloader_op", "from_torch", "gradients", "group", "op",
    "parameter", "parameters_of", "placeholder", "topological", "variable",
]


def from_torch(module: Any, sample_input_shape: Any, **options: Any) -> Any:
    """Import a torch model into a graph (see ``_torch_import.from_torch``)."""
    from ._torch_import import from_torch as _from_torch

    return _from_torch(module, sample_input_shape, **options)


def __getattr__(name: str) -> Callable[..., Node]:
    """Every registered op as a node-building function: ``g.conv2d(x, w, b, padding=1)``."""
    from .._global import get_registry

    if name.startswith("__") or name not in get_registry().ops:
        raise AttributeError(f"module 'algoswap.graph' has no attribute {name!r}")

    def build(*inputs: Any, name: str | None = None, algorithm: str = "default", **attrs: Any) -> Node:
        return op(op_name, *inputs, name=name, algorithm=algorithm, **attrs)

    op_name = name
    build.__name__ = build.__qualname__ = name
    build.__doc__ = get_registry().spec(name).describe()
    globals()[name] = build
    return build
