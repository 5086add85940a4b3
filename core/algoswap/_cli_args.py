"""What the ``algoswap`` command accepts: argument types and the names it checks against the registry.

A user's mistake is a ``UsageError``; the command reports it as argparse reports its own (the
subcommand's usage, then ``algoswap SUBCOMMAND: error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
from typing import Iterable

from ._registry import suggest


class UsageError(Exception):
    """A value the command line gave that the command cannot use (an unknown op or backend name, ...)."""


def positive_int(text: str) -> int:
    """An ``int >= 1`` (argparse ``type``: a bad value is a usage error naming the option)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def known_name(option: str, kind: str, name: str, known: Iterable[str], listed: bool = True) -> str:
    """``name`` if it is one of ``known``; else a ``UsageError`` naming the option, with close matches
    (and every known name, where ``listed`` and there are few enough to read)."""
    names = list(known)
    if name in names:
        return name
    every = f" (known {kind}s: {', '.join(names) or 'none'})" if listed else ""
    raise UsageError(f"argument {option}: unknown {kind} {name!r}{every}{suggest(name, names)}")
