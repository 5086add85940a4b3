"""Logs and progress from rank 0 alone: n ranks running the same loop would otherwise say everything n times."""

from __future__ import annotations

import builtins
import logging
from typing import Any, Iterable, Iterator, TypeVar

from .._progress import progress as _progress
from ._world import world

T = TypeVar("T")


def print(*args: Any, **kwargs: Any) -> None:  # noqa: A001 (rank 0's print)
    """``print`` on rank 0; nothing on the other ranks."""
    if world().is_main:
        builtins.print(*args, **kwargs)


def progress(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """``items``, with a progress bar on rank 0's stderr (``algoswap``'s own); plain on the other ranks."""
    if world().is_main:
        yield from _progress(items, label, total)
    else:
        yield from items


class MainRankOnly(logging.Filter):
    """A logging filter passing records on rank 0 only: ``handler.addFilter(dist.MainRankOnly())``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return world().is_main
