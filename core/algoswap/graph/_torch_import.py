"""Import a torch model into a graph through swap_backend's tracing.

``swap_backend``'s lowering (``torch.fx``; batch norms folded into the convolution before them, as
in inference) gives the graph; here it gets static shapes: weights become parameters (named after
their module), the model's inputs placeholders, Python bookkeeping (``x.size(0)``) is evaluated on
the static shapes, and op nodes keep their requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ._node import Call, GraphError, Node, Origin, constant, flat_state, nodes_in, op, parameter, placeholder, unflat_state, with_values


@dataclass
class ImportedModel:
    """The graph of a torch model: its placeholders, its output node and its parameters by name."""

    inputs: list[Node]
    output: Any
    parameters: dict[str, Node]

    def __getstate__(self) -> dict[str, Any]:
        return flat_state(dict(self.__dict__), [*self.inputs, *nodes_in(self.output), *self.parameters.values()])

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(unflat_state(state))


def from_torch(module: Any, sample_input_shape: Sequence[int], *, algorithm: Any = None, dtype: Any = None,
               backends: Sequence[str] | None = None, algos: Any = None, algorithms: Any = None) -> ImportedModel:
    """The graph of ``module`` (put in eval mode) for inputs of ``sample_input_shape`` (batch included).

    ``algorithm`` and ``backends`` are swap_backend's (``algos``, ``algorithms``: old names of
    ``algorithm``); each node keeps its request. Nodes swap_backend would run in PyTorch
    (``fallback="torch"``) cannot be imported: the error names them.
    """
    from .._requests import selector_argument
    from .._torch.convert import swap_backend

    selector = selector_argument("from_torch", algorithm, algos=algos, algorithms=algorithms)
    module.eval()
    model = swap_backend(module, selector, sample_input_shape, dtype=dtype, fuse=False, backends=backends)
    values: dict[int, Any] = {}
    inputs = []
    for index, (node, name) in enumerate(zip(model.inputs, model.input_names)):
        shape = tuple(sample_input_shape) if index == 0 else ()
        values[id(node)] = placeholder(name, shape, model.dtype)
        inputs.append(values[id(node)])
    params: dict[str, Node] = {}
    for node in model.nodes:
        if node.kind == "python" and isinstance(node.source, Call):
            values[id(node)] = node.source.target(*with_values(node.source.args, values), **with_values(node.source.kwargs, values))
        elif node.kind == "op":
            values[id(node)] = _op_node(node, values, params)
        else:
            label = node.source.label if isinstance(node.source, Call) else node.kind
            raise GraphError(f"from_torch: node {node.name!r} ({label}) runs in PyTorch; it has no registry op")
    return ImportedModel(inputs, with_values(model.output, values), params)


def _op_node(node: Node, values: dict[int, Any], params: dict[str, Node]) -> Node:
    module = node.source.module if isinstance(node.source, Origin) else None
    arrays: list[Node | None] = []
    for source in node.inputs:
        if source is not None and source.kind == "constant" and id(source) not in values:
            if module is not None:  # a module's weight: trainable
                values[id(source)] = params[source.name] = parameter(source.name, source.value)
            else:
                values[id(source)] = constant(source.value, source.name)
        arrays.append(None if source is None else values[id(source)])
    return op(str(node.op), *arrays, name=node.name, algorithm=node.request, **with_values(node.attrs, values))
