"""The core's kinds of cache (see ``algoswap.cache_limits()``) and the registry's selection cache.

Every cache the core keeps grows with the distinct calls a program makes (input shapes, above all),
so each is an ``LRUCache`` of one of these kinds, bounded by its size:

- ``selections``: selection's own, one per validated call under its typed key (``_select.call_key``:
  op, request, memory space, input shapes, dtypes, attributes as typed values), with the
  implementation chosen for it;
- ``ops_calls`` and ``torch_calls``: the front ends' calls prepared from a selection (``algoswap.ops``
  and swapped torch layers), keyed on what each front end sees before validation; kept beside the
  selections (``SelectionCache.prepared``) and emptied with them whenever the registry changes;
- ``graph_programs``: per graph Executor (a swap_backend Model has one), its planned program for each
  set of input shapes and memory spaces;
- ``graph_captures``: per graph Executor, its programs captured as device graphs (``graph._capture``),
  each holding the device memory its graph reads and writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._cache import CacheKind, LRUCache, cache_limits, declare_cache, set_cache_limit

if TYPE_CHECKING:
    from ._select import Selection

__all__ = ["SelectionCache", "cache_limits", "set_cache_limit"]

SELECTIONS = declare_cache("selections", 2048, "the registry's validated calls and the implementation chosen for each")
OPS_CALLS = declare_cache("ops_calls", 1024, "algoswap.ops calls ready to run (per op, request, input types and attributes)")
TORCH_CALLS = declare_cache("torch_calls", 1024, "swapped torch layers' calls ready to run (per op, request, tensor shapes)")
GRAPH_PROGRAMS = declare_cache("graph_programs", 32, "per graph Executor: its planned program for each set of input shapes")
GRAPH_CAPTURES = declare_cache("graph_captures", 8, "per graph Executor: its programs captured as device graphs (CUDA graphs), "
                               "per input signature, with the reason of those that run eagerly")


class SelectionCache(LRUCache["Selection"]):
    """Selection's cache: the implementation chosen for each call, under the call's typed key (written
    by ``_select.select`` alone), and, beside it, one cache per front end of what that front end
    prepares from selections (``prepared(kind)``). Each evicts its own least recently used entries
    when full; ``clear()`` (when a plugin registers) empties them all and renews ``epoch``."""

    __slots__ = ("_prepared", "epoch")

    def __init__(self) -> None:
        super().__init__(SELECTIONS)
        self._prepared: dict[str, LRUCache[Any]] = {}
        self.epoch = object()  # renewed by clear(): what was bound under another epoch may be stale

    def prepared(self, kind: CacheKind) -> LRUCache[Any]:
        """The cache of front-end calls of ``kind``, made on first use."""
        cache = self._prepared.get(kind.name)
        if cache is None:
            cache = self._prepared.setdefault(kind.name, LRUCache(kind))
        return cache

    def clear(self) -> None:
        super().clear()
        for cache in list(self._prepared.values()):
            cache.clear()
        self.epoch = object()  # after: a call bound under the new epoch was prepared from the emptied caches
