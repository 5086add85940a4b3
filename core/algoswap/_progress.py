"""A small progress bar for long work (autotuning, benchmarks, training): no dependency."""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], label: str, total: int | None = None, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items``, drawing ``label [#####.....] 3/10 1.2s`` on a terminal (in logs: a line per 10%)."""
    stream = stream or sys.stderr
    items = list(items) if total is None else items
    count = total if total is not None else len(items)  # type: ignore[arg-type]
    live = stream.isatty()
    started = time.perf_counter()
    for done, item in enumerate(items, start=1):
        yield item
        elapsed = time.perf_counter() - started
        filled = int(20 * done / max(count, 1))
        line = f"{label} [{'#' * filled}{'.' * (20 - filled)}] {done}/{count} {elapsed:.1f}s"
        if live:
            stream.write("\r" + line + ("\n" if done == count else ""))
        elif done == count or done % max(1, count // 10) == 0:
            stream.write(line + "\n")
        stream.flush()
