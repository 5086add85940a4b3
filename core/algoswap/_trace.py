"""``algoswap.trace()``: record which backend, algorithm and kernel ran for each call."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

_local = threading.local()


class Trace(list):  # type: ignore[type-arg]
    """The selections made while tracing, in call order."""

    def table(self) -> str:
        rows = [f"{s.call.op:<22} {s.impl.qualified:<18} {s.kernel:<34} {s.call.shapes} {s.call.dtype}" for s in self]
        return "\n".join([f"{'op':<22} {'implementation':<18} {'kernel':<34} shapes dtype"] + rows)

    def __str__(self) -> str:
        return self.table()


def record(selection: Any) -> None:
    active = getattr(_local, "trace", None)
    if active is not None:
        active.append(selection)


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Collect every selection made by ``algoswap.ops`` calls in this thread while inside the block."""
    previous = getattr(_local, "trace", None)
    _local.trace = collected = Trace()
    try:
        yield collected
    finally:
        _local.trace = previous
