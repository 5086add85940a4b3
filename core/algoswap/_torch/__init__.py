"""The PyTorch side of algoswap: swap layers of torch models for registry implementations.

Imported on first use of ``algoswap.swap_conv2d`` and friends, never by ``import algoswap``.
"""

from __future__ import annotations

from .convert import swap_backend
from .explain import Explanation, Row, explain
from .model import Model
from .modules import ModuleBinding, SwappedModule, register_module_binding
from .selectors import SelectorError, prefer
from .swap import swap_conv2d, swap_operation, swapped_layers

__all__ = [
    "Explanation",
    "Model",
    "ModuleBinding",
    "Row",
    "SelectorError",
    "SwappedModule",
    "explain",
    "prefer",
    "register_module_binding",
    "swap_backend",
    "swap_conv2d",
    "swap_operation",
    "swapped_layers",
]
