"""``algoswap.explain``: for every swapped layer, what runs, what was passed over and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._errors import AlgoswapError
from .._select import Selection
from .bridge import gradient_choices
from .switches import following_torch
from .._requests import IN_TORCH
from .custom import SWAPPED_WITH, CustomLayer
from .modules import LEFT_IN_TORCH, SwappedModule, binding_for
from .selectors import Layer, _select_for

REQUESTED = "torch (requested)"  # the implementation column of a layer the selector left in PyTorch
KEPT_NOTE = "the selector left it in PyTorch"


@dataclass
class Row:
    """One layer: its name, op, input, and the implementation that runs it (or why none does)."""

    name: str
    op: str
    input_shape: tuple[int, ...] | None
    request: str
    implementation: str = "-"
    kernel: str = "-"
    rejected: list[str] = field(default_factory=list)
    backward: list[str] = field(default_factory=list)
    note: str = ""

    @classmethod
    def from_selection(cls, name: str, selection: Selection, request: str, input_shape: Any, backward: bool = True) -> "Row":
        return cls(
            name, selection.call.op, input_shape, request, selection.impl.qualified, selection.kernel,
            [f"{impl}: {reason}" for impl, reason in selection.rejected],
            [choice.label for choice in gradient_choices(selection)] if backward else [],
        )


class Explanation(list):  # type: ignore[type-arg]
    """The rows of ``explain``: a list of ``Row``; ``str()`` gives the table people read. ``capture``
    (an ``algoswap.Model``'s): how its latest call ran, as one replayed device graph or eagerly, and why."""

    capture: str = ""

    def __str__(self) -> str:
        return self.to_text()

    def to_text(self, backward: bool = True, notes_once: bool = False) -> str:
        """The table, then each layer's rejected candidates and notes. ``backward=False`` leaves out the
        backward column and notes (an inference run); ``notes_once`` prints each distinct note once, with
        the number of layers it applies to, instead of under every layer."""
        with_backward = backward and any(r.backward for r in self)
        header = ("layer", "op", "input", "request", "implementation", "kernel") + (("backward",) if with_backward else ())
        cells = [header] + [
            (r.name, r.op, "x".join(map(str, r.input_shape)) if r.input_shape else "?", r.request, r.implementation,
             r.kernel) + ((_backward_summary(r.backward),) if with_backward else ())
            for r in self
        ]
        widths = [max(len(str(row[i])) for row in cells) for i in range(len(header))]
        lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        notes = {r.name: _notes(r, with_backward, rejected=not notes_once) for r in self}
        details = (_rejected_once(self) if notes_once else []) + [f"{name}:\n" + "\n".join(text) for name, text in notes.items() if text]
        capture = [f"graph capture: {self.capture}"] if self.capture else []
        return "\n".join(lines + ([""] + details if details else []) + capture)


def _notes(row: Row, backward: bool, rejected: bool = True) -> list[str]:
    """A layer's rejected candidates, its unusual backward choices (fallbacks and gaps) and its note."""
    unusual = [text for text in row.backward if "(" in text] if backward else []
    notes = [f"  rejected {text}" for text in _grouped(row.rejected)] if rejected else []
    return notes + [f"  backward {text}" for text in unusual] + ([f"  note: {row.note}"] if row.note else [])


def _rejected_once(rows: list[Row]) -> list[str]:
    """Each distinct reason for rejecting candidates once: the candidates (those of one backend folded into
    "cuda (12 algorithms)") and how many layers they were rejected on."""
    candidates: dict[str, dict[str, None]] = {}
    layers: dict[str, set[str]] = {}
    for row in rows:
        for text in row.rejected:
            name, _, reason = text.partition(": ")
            candidates.setdefault(reason, {})[name] = None
            layers.setdefault(reason, set()).add(row.name)
    if not candidates:
        return []
    lines = ["rejected candidates, each reason once:"]
    for reason, names in candidates.items():
        per_backend: dict[str, list[str]] = {}
        for name in names:
            per_backend.setdefault(name.split(":")[0], []).append(name)
        shown = ", ".join(group[0] if len(group) == 1 else f"{backend} ({len(group)} algorithms)" for backend, group in per_backend.items())
        count = len(layers[reason])
        lines.append(f"  {shown} on {count} layer{'s' if count > 1 else ''}: {reason}")
    return ["\n".join(lines)]


def _grouped(rejected: list[str]) -> list[str]:
    """"backend:algorithm: reason" lines, those of one backend sharing a reason (an unavailable
    backend) folded into one: "cuda (10 algorithms): backend unavailable: ..."."""
    groups: dict[tuple[str, str], list[str]] = {}
    for text in rejected:
        name, _, reason = text.partition(": ")
        groups.setdefault((name.split(":")[0], reason), []).append(name)
    return [f"{names[0]}: {reason}" if len(names) == 1 else f"{backend} ({len(names)} algorithms): {reason}"
            for (backend, reason), names in groups.items()]


def _backward_summary(backward: list[str]) -> str:
    """The implementations the backward pass uses, e.g. "numpy:direct, numpy:gemm" ("-" if none)."""
    names = sorted({text.split(" ")[2] for text in backward if text.count(" ") >= 2 and ":" in text.split(" ")[2]})
    return ", ".join(names) or ("reshape" if backward else "-")


def _module_row(name: str, module: SwappedModule) -> Row:
    binding = module.algoswap_binding
    last = module.__dict__.get("algoswap_last_input")
    if last is None:
        return Row(name, binding.op, None, module.algoswap_request, note="not run yet: call the model or pass sample_input_shape")
    shape, dtype = tuple(last[0]), last[1]
    try:
        selection = _select_for(binding.op, Layer(name, module, shape, dtype), module.algoswap_request, binding.attrs(module))
    except AlgoswapError as exc:
        return Row(name, binding.op, shape, module.algoswap_request, note=str(exc))
    return Row.from_selection(name, selection, module.algoswap_request, shape)


def _custom_row(name: str, layer: CustomLayer) -> Row:
    cls = layer.cls.rpartition(".")[2]
    return Row(name, layer.op, layer.input_shape, layer.algorithm, f"{cls} (swap_with)", f"{layer.cls}, in PyTorch",
               note=f"swap_with={cls}({layer.op} layer, {layer.algorithm!r}) runs it as written")


def _row(name: str, module: nn.Module) -> Row | None:
    """The row of a swapped layer, of one left in PyTorch, or of one a swap_with class made; None for other modules."""
    if isinstance(module, SwappedModule):
        return _module_row(name, module)
    if SWAPPED_WITH in module.__dict__:
        return _custom_row(name, module.__dict__[SWAPPED_WITH])
    return _kept_row(name, module) if module.__dict__.get(LEFT_IN_TORCH) else None


def _kept_row(name: str, module: nn.Module) -> Row:
    binding = binding_for(module)
    op = binding.op if binding is not None else type(module).__name__
    return Row(name, op, None, IN_TORCH, REQUESTED, "PyTorch", note=KEPT_NOTE)


def explain(model: Any) -> Explanation:
    """What runs each swapped layer of ``model`` (an ``nn.Module`` or an ``algoswap.Model``):
    backend, algorithm, kernel, the candidates rejected with their reasons, and the backward ops;
    layers a selector left in PyTorch ("torch") and those a ``swap_with`` class replaced are listed too."""
    if hasattr(model, "explain") and not isinstance(model, nn.Module):
        return model.explain()  # type: ignore[no-any-return]
    if not isinstance(model, nn.Module):
        raise TypeError(f"explain: expected a torch.nn.Module or an algoswap.Model, got {type(model).__name__}")
    with following_torch():  # the kernels as the layers' calls run them now
        return Explanation(row for name, m in model.named_modules() if (row := _row(name, m)) is not None)


__all__ = ["explain", "Explanation", "Row", "torch"]
