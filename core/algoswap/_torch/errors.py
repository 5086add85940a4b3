"""Errors of ``swap_backend``: a model it cannot convert, and the nodes no registry op runs."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import AlgoswapError


class ConversionError(AlgoswapError, ValueError):
    """``swap_backend`` cannot convert this module (training mode, untraceable, a bad argument)."""


@dataclass(frozen=True)
class UnsupportedNode:
    """A node of the traced model that no registry op runs: its name, its target and why."""

    name: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.target}): {self.reason}"


class UnsupportedModelError(ConversionError):
    """Nodes of the model that no registry op runs; ``nodes`` lists every one of them."""

    def __init__(self, caller: str, nodes: list[UnsupportedNode]) -> None:
        self.nodes = nodes
        lines = "\n".join(f"  {node}" for node in nodes)
        super().__init__(
            f"{caller}: {len(nodes)} node{'s' if len(nodes) != 1 else ''} of the model cannot run through the registry:\n"
            f"{lines}\nPass fallback='torch' to run them in PyTorch (explain() then lists them)."
        )
