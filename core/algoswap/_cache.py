"""Bounded caches: every cache algoswap (or a plugin) keeps is an ``LRUCache`` of a declared kind.

    >>> from algoswap import LRUCache, declare_cache
    >>> PLANS = declare_cache("myplugin_plans", 256, "compiled kernels, per shape")
    >>> plans = LRUCache(PLANS)

A kind has a name, a default size and a sentence saying what it holds; ``algoswap.cache_limits()``
lists them all, ``algoswap.set_cache_limit(name, size)`` changes one (existing caches trim at their
next insertion), and the environment variable ``ALGOSWAP_CACHE_<NAME>`` (upper case) sets the
starting size, read when the kind is declared (on first use of the module that declares it).

Entries come with calls not seen before (input shapes, above all), and as caches fill, each evicts old ones, here
and in the libraries below (a plugin's compiled kernels, oneDNN's primitives). Freed memory is not always given
back to the system: glibc keeps freed pages that lie between live allocations (a program seeing ever new input
shapes grew 6 MB per 1,000 shapes that way, every cache full). So every ``TRIM_EVERY`` entries stored (all caches
together), freed memory is handed back (glibc's ``malloc_trim``: 0.4 to 1.2 ms on a 360 MB process, where planning
a new shape of issue 33's model on oneDNN takes 2.2 ms and stores about 4 entries; nothing elsewhere). Every 256
entries left RSS swinging by up to 25 MB between two trims, every 32 by 7 MB. A program that keeps seeing the calls
it has seen stores nothing and never pays for it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

V = TypeVar("V")
_MISSING: Any = object()


@dataclass
class CacheKind:
    """One kind of cache: its current size limit (entries per cache) and what it holds."""

    name: str
    size: int
    doc: str


_KINDS: dict[str, CacheKind] = {}
_kinds_lock = threading.Lock()


def _env_size(name: str, default: int) -> int:
    text = os.environ.get(f"ALGOSWAP_CACHE_{name.upper()}", "").strip()
    if not text:
        return default
    try:
        return _checked_size(name, int(text))
    except ValueError:
        raise ValueError(f"ALGOSWAP_CACHE_{name.upper()}={text!r}: expected an int >= 0 (entries per cache)") from None


def _checked_size(name: str, size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"cache {name!r}: size must be an int >= 0 (entries per cache), got {size!r}")
    return size


def declare_cache(name: str, size: int, doc: str) -> CacheKind:
    """Declare a kind of cache (once per name; a second declaration returns the first)."""
    with _kinds_lock:
        kind = _KINDS.get(name)
        if kind is None:
            kind = _KINDS[name] = CacheKind(name, _env_size(name, _checked_size(name, size)), doc)
        return kind


def cache_limits() -> dict[str, CacheKind]:
    """Every declared kind of cache, by name: its size limit and what it holds."""
    return dict(_KINDS)


def set_cache_limit(name: str, size: int) -> None:
    """Set the size limit of a kind of cache (entries per cache; 0 turns caching off)."""
    if name not in _KINDS:
        known = ", ".join(sorted(_KINDS)) or "none declared yet"
        raise KeyError(f"no cache kind named {name!r} (known: {known})")
    _KINDS[name].size = _checked_size(name, size)


TRIM_EVERY = 32  # entries stored between two returns of freed memory to the system


class _Stored:
    """Counts the entries stored by every cache and hands freed memory back every TRIM_EVERY of them."""

    count = 0
    trim: Callable[[int], int] | None = None
    lock = threading.Lock()

    @classmethod
    def add(cls, count: int) -> None:
        with cls.lock:
            cls.count += count
            if cls.count < TRIM_EVERY:
                return
            cls.count = 0
        release_freed_memory()


def release_freed_memory() -> None:
    """Hand the memory freed inside the process back to the system (glibc's malloc_trim; elsewhere nothing)."""
    if _Stored.trim is None:
        _Stored.trim = _malloc_trim()
    _Stored.trim(0)


def _malloc_trim() -> Callable[[int], int]:
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
            return trim
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass
    return lambda pad: 0


class LRUCache(Generic[V]):
    """A thread-safe mapping that keeps at most its kind's size of entries, dropping the least
    recently used first."""

    __slots__ = ("kind", "_entries", "_lock")

    def __init__(self, kind: CacheKind) -> None:
        self.kind = kind
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), or ``default``. A hit takes no lock: it is
        read on every call of every front end, each OrderedDict method is one C call, atomic under the
        GIL (keys are tuples of builtins, types and dtypes, hashed and compared in C), and an entry
        evicted between the two calls is still a right answer."""
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            self._entries.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile
            pass
        return value

    def put(self, key: Hashable, value: V) -> V:
        """Store ``value`` under ``key``, dropping the least recently used entries beyond the limit."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.kind.size:
                self._entries.popitem(last=False)
        _Stored.add(1)
        return value

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            return self._entries.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._entries)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"LRUCache({self.kind.name!r}, {len(self)}/{self.kind.size})"
