"""The core's kinds of cache (see ``algoswap.cache_limits()``) and the registry's selection cache.

Every cache the core keeps grows with the distinct calls a program makes (input shapes, above all),
so each is an ``LRUCache`` of one of these kinds, bounded by its size:

- ``selections``: the registry's, one per validated call (op, request, memory space, input shapes,
  dtypes, attributes as typed values) with the implementation chosen for it;
- ``ops_calls`` and ``torch_calls``: calls ready to run for ``algoswap.ops`` and for swapped torch
  layers, keyed on what those front ends see before validation; cleared with the selections whenever
  the registry changes;
- ``graph_programs``: per graph Executor (a swap_backend Model has one), its planned program for each
  set of input shapes and memory spaces.
"""

from __future__ import annotations

from typing import Any

from ._cache import LRUCache, cache_limits, declare_cache, set_cache_limit

__all__ = ["SelectionCache", "cache_limits", "set_cache_limit"]

SELECTIONS = declare_cache("selections", 4096, "the registry's validated calls and the implementation chosen for each")
OPS_CALLS = declare_cache("ops_calls", 1024, "algoswap.ops calls ready to run (per op, request, input types and attributes)")
TORCH_CALLS = declare_cache("torch_calls", 1024, "swapped torch layers' calls ready to run (per op, request, tensor shapes)")
GRAPH_PROGRAMS = declare_cache("graph_programs", 32, "per graph Executor: its planned program for each set of input shapes")


class SelectionCache(LRUCache[Any]):
    """The registry's selections, with the front ends' calls ready to run (``ops``, ``torch``), which
    hold selections too: ``clear()`` (when a plugin registers) empties all three."""

    __slots__ = ("ops", "torch")

    def __init__(self) -> None:
        super().__init__(SELECTIONS)
        self.ops: LRUCache[Any] = LRUCache(OPS_CALLS)
        self.torch: LRUCache[Any] = LRUCache(TORCH_CALLS)

    def clear(self) -> None:
        super().clear()
        self.ops.clear()
        self.torch.clear()
