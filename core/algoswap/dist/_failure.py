"""A failing peer as an error naming it, never a hang.

Every collective runs within the group's timeout (``init(timeout=)``). When one fails (a peer died, hangs,
or runs different work), the ranks that saw the failure meet in a roll call on the store, keyed by the
group and the collective's number (the same on every rank, which run the same collectives in the same
order): each answers, and after ``failure_wait`` seconds the ranks that did not answer are named, with the
host and process id they published when they joined.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, TypeVar

from .._groups import Group
from ._world import DistError, state

T = TypeVar("T")
_counters: dict[str, Any] = {}


class PeerError(DistError):
    """A collective failed because a rank of its group stopped answering; the message names it."""


def next_number(group: Group) -> int:
    """The number of the group's next collective on this rank (from 1)."""
    counter = _counters.setdefault(group.name, itertools.count(1))
    return int(next(counter))


def guarded(group: Group, what: str, number: int, run: Callable[[], T]) -> T:
    """``run()``, its failure turned into a PeerError naming the ranks that did not answer."""
    started = time.monotonic()
    try:
        return run()
    except RuntimeError as exc:
        raise PeerError(describe(group, what, number, exc, time.monotonic() - started)) from exc


def describe(group: Group, what: str, number: int, exc: BaseException, elapsed: float) -> str:
    current = state()
    me = current.world.rank
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    head = (f"{what} (collective #{number} of group {group.name!r}, ranks {_ranks(group.ranks)}) failed on rank {me} "
            f"({current.world.host}) after {elapsed:.1f} s: {first}")
    try:
        silent = _roll_call(current.store, group, number, me, current.failure_wait)
    except Exception as store_error:  # the store itself is gone: it lived on rank 0, or torchrun's agent stopped
        return f"{head}; the store is unreachable too ({store_error}): rank 0 or the launcher stopped"
    if not silent:
        return f"{head}; every rank of the group answered a roll call: the failure is the communication library's"
    names = "; ".join(f"rank {r} ({_host(current.store, r)})" for r in silent)
    return f"{head}; did not answer a roll call within {current.failure_wait:g} s (stopped or stuck): {names}"


def _roll_call(store: Any, group: Group, number: int, me: int, wait: float) -> list[int]:
    """The group's ranks that do not answer within ``wait`` seconds."""
    key = f"rollcall/{group.name}/{number}/{{rank}}"
    store.set(key.format(rank=me), "here")
    deadline = time.monotonic() + wait
    pending = [r for r in group.ranks if r != me]
    while pending and time.monotonic() < deadline:
        pending = [r for r in pending if not store.check([key.format(rank=r)])]
        time.sleep(0.05)
    return pending


def _host(store: Any, rank: int) -> str:
    key = f"host/{rank}"
    return store.get(key).decode() if store.check([key]) else "host unknown"


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if ranks == tuple(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2 else \
        ", ".join(map(str, ranks))
