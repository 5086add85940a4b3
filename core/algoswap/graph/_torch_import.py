"""Import a torch model into a graph through swap_backend's tracing.

An adapter: ``swap_backend`` traces and lowers the model (``torch.fx``; batch norms folded into the
convolution before them, as in inference), and its plan's steps become graph nodes here: weights
become parameters (named after their module), the model's inputs placeholders, Python bookkeeping
steps (``x.size(0)``) are evaluated on the static shapes, and op steps keep their requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ._node import GraphError, Node, constant, op, parameter, placeholder


@dataclass
class ImportedModel:
    """The graph of a torch model: its placeholders, its output node and its parameters by name."""

    inputs: list[Node]
    output: Any
    parameters: dict[str, Node]


def from_torch(module: Any, sample_input_shape: Sequence[int], *, algos: Any = None, dtype: Any = None) -> ImportedModel:
    """The graph of ``module`` (put in eval mode) for inputs of ``sample_input_shape`` (batch included).

    ``algos`` are swap_backend's selectors; each node keeps its request. Nodes swap_backend would run
    in PyTorch (``fallback="torch"``) cannot be imported: the error names them.
    """
    from .._torch.convert import swap_backend
    from .._torch.plan import OpStep, PythonStep, resolve

    module.eval()
    model = swap_backend(module, algos, sample_input_shape, dtype=dtype, fuse=False)
    values: list[Any] = [None] * model.slot_count
    inputs = []
    for index, (slot, name) in enumerate(zip(model.inputs, model.input_names)):
        shape = tuple(sample_input_shape) if index == 0 else ()
        values[slot] = placeholder(name, shape, model.dtype)
        inputs.append(values[slot])
    params: dict[str, Node] = {}
    for step in model.steps:
        if isinstance(step, PythonStep):
            values[step.output] = step.function(*resolve(step.args, values))
        elif isinstance(step, OpStep):
            values[step.output] = _op_node(step, values, model.constants, params, resolve)
        else:
            raise GraphError(f"from_torch: step {getattr(step, 'name', step)!r} ({type(step).__name__}) has no registry op")
    return ImportedModel(inputs, resolve(model.output, values), params)


def _op_node(step: Any, values: list[Any], constants: dict[int, Any], params: dict[str, Node], resolve: Any) -> Node:
    from .._global import get_registry

    names = get_registry().spec(step.op).flat_input_names(len(step.inputs))
    arrays: list[Node | None] = []
    for position, slot in enumerate(step.inputs):
        if slot is None:
            arrays.append(None)
        elif values[slot] is None and slot in constants:
            label = f"{step.module or step.name}.{names[position]}"
            if position in step.params or step.module is not None:  # a module's weight: trainable
                values[slot] = params[label] = parameter(label, constants[slot])
            else:
                values[slot] = constant(constants[slot], label)
            arrays.append(values[slot])
        else:
            arrays.append(values[slot])
    attrs = resolve(step.attrs, values) if step.dynamic else step.attrs
    return op(step.op, *arrays, name=step.name, algorithm=step.request, **attrs)
