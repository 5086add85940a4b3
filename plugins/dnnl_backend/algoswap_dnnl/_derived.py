"""Data derived from frozen arrays (reordered weights, whether a weight is finite), kept while the array lives.

Only frozen arrays (``algoswap.is_frozen``: nothing can write them) have their derived data kept: a
read-only flag alone does not stop a write through the array's base. Entries are keyed by the array's
id and a form, checked through a weak reference (an id reused after garbage collection never
matches), dropped when the array dies and bounded by their cache kind (least recently used first).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Hashable

import numpy as np

from algoswap import CacheKind, LRUCache


class Derived:
    """One kind of data derived from frozen arrays."""

    def __init__(self, kind: CacheKind) -> None:
        self._entries: LRUCache[tuple[weakref.ref[np.ndarray], Any]] = LRUCache(kind)

    def get(self, array: np.ndarray, form: Hashable, make: Callable[[], Any]) -> Any:
        """What ``make()`` derives from frozen ``array`` in ``form``: made at the first call, then kept."""
        key = (id(array), form)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is array:
            return entry[1]
        value = make()
        self._entries.put(key, (weakref.ref(array, functools.partial(self._drop, key)), value))
        return value

    def _drop(self, key: tuple[int, Hashable], ref: weakref.ref[np.ndarray]) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            self._entries.pop(key)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
