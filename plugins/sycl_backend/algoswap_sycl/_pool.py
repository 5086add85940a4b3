"""Reused USM allocations: fresh memory is faulted in page by page at its first touch (a 9 MiB upload took
5-15 ms fresh against 0.7 ms into memory touched before), so allocations go back to a pool and are reused.

A scratch allocation is given back explicitly once the op is over (``give``). An output or an upload is
handed out with a *lease*, held by its SyclArray and by every host view of it (numpy arrays, torch
tensors): the allocation comes back to the pool when the last of them is gone. (A dpctl memory object
viewing the allocation would do too, but costs 10-30 us to make: dpctl asks the runtime about the pointer.)
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

# Free allocations kept: at most PER_SIZE of one size, MAX_FREE in all and MAX_BYTES together, the least recently
# given back freed first. A program seeing ever new input shapes gives back allocations of ever new sizes: the
# count bounds their number (small ones too: each also costs its runtime's bookkeeping), the bytes their memory.
PER_SIZE = 4
MAX_FREE = 256
MAX_BYTES = 512 * 2**20


class Lease:
    """A pooled allocation in use; it goes back to its pool when this object is gone."""

    __slots__ = ("memory", "__weakref__")

    def __init__(self, memory: Any) -> None:
        self.memory = memory


class HostWindow:
    """The numpy array interface of leased USM memory: arrays made from it keep the lease alive."""

    def __init__(self, lease: Lease, shape: tuple[int, ...], typestr: str) -> None:
        self.lease = lease
        self.__array_interface__ = {"data": (lease.memory._pointer, False), "shape": shape, "typestr": typestr,
                                    "version": 3}


class Pool:
    """Free USM allocations by size, bounded by PER_SIZE, MAX_FREE and MAX_BYTES (module attributes: tests lower them)."""

    def __init__(self) -> None:
        self.free: dict[int, list[Any]] = {}
        self.given: OrderedDict[int, Any] = OrderedDict()  # id -> every free allocation, least recently given back first
        self.free_bytes = 0
        self._lock = threading.RLock()  # re-entrant: a lease may come back during a collection inside take()

    def take(self, nbytes: int) -> Any | None:
        """A free allocation of exactly ``nbytes``, or None."""
        with self._lock:
            free = self.free.get(nbytes)
            if not free:
                return None
            memory = free[-1]
            self._unlist(memory)
            return memory

    def give(self, memory: Any) -> None:
        """``memory`` is no longer used: keep it for reuse if the bounds allow (else it is freed), freeing the least
        recently given back allocations beyond MAX_FREE and MAX_BYTES."""
        with self._lock:
            free = self.free.get(memory.nbytes, [])
            if len(free) >= PER_SIZE or memory.nbytes > MAX_BYTES:
                return
            free.append(memory)
            self.free[memory.nbytes] = free  # a size is listed only while it has free allocations
            self.given[id(memory)] = memory
            self.free_bytes += memory.nbytes
            while len(self.given) > MAX_FREE or self.free_bytes > MAX_BYTES:
                self._unlist(next(iter(self.given.values())))

    def _unlist(self, memory: Any) -> None:
        free = self.free[memory.nbytes]
        free.remove(memory)
        if not free:
            del self.free[memory.nbytes]
        del self.given[id(memory)]
        self.free_bytes -= memory.nbytes

    def lease(self, memory: Any) -> Lease:
        """A lease on ``memory``: it comes back here when the lease is gone."""
        lease = Lease(memory)
        weakref.finalize(lease, self.give, memory).atexit = False
        return lease
