"""``algoswap.Model``: a torch model converted by ``swap_backend``, run through the registry on numpy arrays."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch

from .explain import Explanation, Row
from .fusion import AnyStep, FusedStep
from .._frozen import freeze
from .._global import get_registry
from .._inputs import host_array
from .._records import MemorySpace
from .._ref import resolve_ref
from .._select import Selection
from .._runner import bfloat16
from .plan import OpStep, Resident, TorchStep, array_to_tensor, resolve, tensor_to_array

_TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


class Model:
    """The plan of a converted model and the loop that runs it.

    Call it with torch tensors (it returns tensors on the first tensor's device) or numpy arrays
    (it returns arrays); floating inputs are cast to ``dtype``, the dtype of its weights and computation.
    It is for inference: no gradients flow through it. ``steps`` (alias ``plan``) lists what runs.
    """

    def __init__(
        self,
        steps: list[AnyStep],
        constants: dict[int, np.ndarray],
        slot_count: int,
        inputs: list[int],
        input_names: list[str],
        output: Any,
        dtype: str,
    ) -> None:
        self.steps = steps
        self.constants = constants
        self.slot_count = slot_count
        self.inputs = inputs
        self.input_names = input_names
        self.output = output
        self.dtype = dtype
        self._template = self._make_template()

    @property
    def plan(self) -> list[AnyStep]:
        """The steps, in the order they run (the same list as ``steps``)."""
        return self.steps

    @property
    def torch_dtype(self) -> torch.dtype:
        return _TORCH_DTYPES[self.dtype]

    @property
    def folded_batchnorms(self) -> list[str]:
        """The batch norms folded into the convolution before them."""
        return [name for step in self.op_steps() for name in step.folded]

    @property
    def fused(self) -> list[FusedStep]:
        """The conv2d chains (conv2d+add+relu, conv2d+relu, ...) that may run as one conv2d_fused call."""
        return [step for step in self.steps if isinstance(step, FusedStep)]

    def op_counts(self) -> dict[str, int]:
        """How many steps run each registry op (members of fused chains included; fallback steps count under "torch")."""
        counted = [step.op for step in self.op_steps()] + ["torch" for step in self.steps if isinstance(step, TorchStep)]
        return dict(Counter(counted))

    def op_steps(self) -> list[OpStep]:
        """Every op step in plan order, the members of fused chains included."""
        steps: list[OpStep] = []
        for step in self.steps:
            steps += step.members if isinstance(step, FusedStep) else [step] if isinstance(step, OpStep) else []
        return steps

    # ------------------------------------------------------------------ running

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.inputs):
            names = ", ".join(self.input_names)
            raise TypeError(f"Model takes {len(self.inputs)} input{'s' if len(self.inputs) != 1 else ''} ({names}); got {len(inputs)}")
        like = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        arrays = [self._to_array(x, name) for x, name in zip(inputs, self.input_names)]
        return _wrap(self.run(*arrays), like)

    def run(self, *arrays: np.ndarray) -> Any:
        """Run the plan on numpy arrays already in ``dtype``; returns the output structure of numpy arrays."""
        values = list(self._template)
        for slot, array in zip(self.inputs, arrays):
            values[slot] = array
        for step in self.steps:
            step.run(values)
            for slot in step.free:
                values[slot] = None
        return resolve(self.output, values)

    def _to_array(self, value: Any, name: str) -> Any:
        """An input as a contiguous numpy array; floating inputs in the model's dtype, others as they are."""
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            tensor = (tensor.to(self.torch_dtype) if tensor.is_floating_point() else tensor).contiguous()
            space = _device_space(tensor.device.type)
            if space is not None and space.from_dlpack is not None:  # stays on its device, not copied
                return Resident(resolve_ref(space.from_dlpack)(tensor), space)
            return tensor_to_array(tensor.cpu())
        array = host_array(value, "algoswap.Model", lambda: name)
        floating = array.dtype.kind == "f" or array.dtype.name == "bfloat16"
        dtype = (bfloat16() if self.dtype == "bfloat16" else self.dtype) if floating else None
        return np.ascontiguousarray(array, dtype=dtype)

    def _make_template(self) -> list[Any]:
        """The slots a run starts from: the weights, frozen (again, after unpickling), in theirs."""
        self.constants = {slot: freeze(array) for slot, array in self.constants.items()}
        template: list[Any] = [None] * self.slot_count
        for slot, array in self.constants.items():
            template[slot] = array
        return template

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_template"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._template = self._make_template()

    # ------------------------------------------------------------------ explaining

    def explain(self) -> Explanation:
        """One row per op step and per fallback node: what runs it, its kernel, the rejected candidates."""
        rows = Explanation()
        for step in self.steps:
            if isinstance(step, OpStep):
                rows.append(_op_row(step))
            elif isinstance(step, FusedStep):
                rows.extend(_fused_rows(step))
            elif isinstance(step, TorchStep):
                rows.append(Row(step.name, step.label, step.last_shape, "-", "torch (fallback)", "PyTorch", note=f"not in the registry: {step.reason}"))
        return rows

    def backends(self) -> list[str]:
        """The backends of the implementations selected so far (empty before the first call without a sample input)."""
        return sorted({chosen.backend.name for chosen in self._selections_that_ran() if chosen is not None})

    def _selections_that_ran(self) -> list[Selection | None]:
        """Each step's latest selection; a fused chain's members count only where the chain ran unfused
        (their own selections may be stale preselections for host inputs)."""
        selections: list[Selection | None] = []
        for step in self.steps:
            if isinstance(step, FusedStep):
                fused = step.last_selection
                selections += [fused] if fused is not None else [m.last_selection for m in step.members]
            elif isinstance(step, OpStep):
                selections.append(step.last_selection)
        return selections

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {op}" for op, n in sorted(self.op_counts().items(), key=lambda item: (-item[1], item[0])))
        backends = ", ".join(self.backends()) or "none selected yet (selection happens at the first call)"
        parts = [f"{len(self.steps)} steps: {counts}" if counts else f"{len(self.steps)} steps"]
        folded = len(self.folded_batchnorms)
        if folded:
            parts.append(f"{folded} batch norm{'s' if folded != 1 else ''} folded")
        if self.fused:
            parts.append(f"{len(self.fused)} conv2d chain{'s' if len(self.fused) != 1 else ''} fusable")
        fallbacks = sum(isinstance(s, TorchStep) for s in self.steps)
        if fallbacks:
            parts.append(f"{fallbacks} node{'s' if fallbacks != 1 else ''} in torch (fallback)")
        parts += [f"backends: {backends}", f"dtype {self.dtype}"]
        return f"algoswap.Model({'; '.join(parts)})"


def _fused_rows(step: FusedStep) -> list[Row]:
    """One conv2d_fused row, or the members' rows with the reason they ran unfused."""
    selection = step.last_selection
    if selection is None:
        rows = [_op_row(member) for member in step.members]
        reason = step.unfused_reason or "not run yet: call the model or pass sample_input_shape"
        rows[0].note = "; ".join(filter(None, [rows[0].note, f"{step.label}: {reason}"]))
        return rows
    row = Row.from_selection(step.name, selection, step.conv.request, selection.call.shapes[0], backward=False)
    row.op = step.label
    fused = [f"{member.op} {member.name!r}" for member in step.members[1:]]
    notes = [f"batch norm {', '.join(step.conv.folded)} folded"] if step.conv.folded else []
    notes.append(f"one {selection.call.op} call: bias, {', '.join(fused)} fused into the convolution")
    row.note = "; ".join(filter(None, [*notes, step.transfers()]))
    return [row]


def _op_row(step: OpStep) -> Row:
    note = f"batch norm {', '.join(step.folded)} folded" if step.folded else ""
    selection = step.last_selection
    if selection is None:
        waiting = "not run yet: call the model or pass sample_input_shape"
        return Row(step.name, step.op, None, step.request, note=f"{note}; {waiting}" if note else waiting)
    row = Row.from_selection(step.name, selection, step.request, selection.call.shapes[0], backward=False)
    row.note = "; ".join(filter(None, [note, step.transfers()]))
    return row


def _device_space(device_type: str) -> MemorySpace | None:
    """The memory space of an available backend whose arrays live on this torch device type ("cuda", ...)."""
    if device_type == "cpu":
        return None
    registry = get_registry()
    return next((b.memory for b in registry.backends.values() if b.memory.name == device_type and b.availability() is True), None)


def _wrap(value: Any, like: torch.Tensor | None) -> Any:
    """Output arrays as tensors on ``like``'s device (or as arrays when the inputs were arrays)."""
    if isinstance(value, Resident):
        if like is not None and like.device.type == value.space.name and hasattr(value.array, "__dlpack__"):
            return torch.utils.dlpack.from_dlpack(value.array)  # stays on the device
        return _wrap(value.host(), like)
    if isinstance(value, np.ndarray):
        array = value if value.flags.writeable else value.copy()  # never hand out the model's weights
        array = np.ascontiguousarray(array)  # channels-last activations come out NCHW
        return array if like is None else array_to_tensor(array).to(like.device)
    if isinstance(value, (list, tuple)):
        return type(value)(_wrap(v, like) for v in value)
    if isinstance(value, dict):
        return {k: _wrap(v, like) for k, v in value.items()}
    return value
