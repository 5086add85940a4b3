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
from typing import Any

PER_SIZE = 4  # free allocations kept per size
MAX_BYTES = 512 * 2**20  # at most this much free memory is kept; the rest is freed


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
    """Free USM allocations by size, bounded by PER_SIZE and MAX_BYTES (module attributes: tests lower them)."""

    def __init__(self) -> None:
        self.free: dict[int, list[Any]] = {}
        self.free_bytes = 0
        self._lock = threading.RLock()  # re-entrant: a lease may come back during a collection inside take()

    def take(self, nbytes: int) -> Any | None:
        """A free allocation of exactly ``nbytes``, or None."""
        with self._lock:
            free = self.free.get(nbytes)
            if not free:
                return None
            self.free_bytes -= nbytes
            memory = free.pop()
            if not free:
                del self.free[nbytes]
            return memory

    def give(self, memory: Any) -> None:
        """``memory`` is no longer used: keep it for reuse if the bounds allow (else it is freed)."""
        with self._lock:
            free = self.free.get(memory.nbytes, [])
            if len(free) < PER_SIZE and self.free_bytes + memory.nbytes <= MAX_BYTES:
                free.append(memory)
                self.free[memory.nbytes] = free  # a size is listed only while it has free allocations
                self.free_bytes += memory.nbytes

    def lease(self, memory: Any) -> Lease:
        """A lease on ``memory``: it comes back here when the lease is gone."""
        lease = Lease(memory)
        weakref.finalize(lease, self.give, memory).atexit = False
        return lease
