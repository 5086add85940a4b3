"""The command line of the generated pages (``algoswap.capabilities_doc``, ``algoswap.reference_doc``): write a page,
or with ``--check`` write nothing and exit 1, naming the command that refreshes it, when the committed one is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from ._errors import AlgoswapError


def stale(path: Path, text: str) -> bool:
    return not path.exists() or path.read_text(encoding="utf-8") != text


def main(argv: Sequence[str] | None, *, module: str, doc: str | None, page: str, source: str,
         render: Callable[[], str]) -> int:
    """``python -m <module> [--check] PATH``; ``source`` names what the page is generated from (for --help)."""
    prog = f"python -m {module}"
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").splitlines()[0])
    parser.add_argument("path", type=Path, help=f"the page to write ({page})")
    parser.add_argument("--check", action="store_true", help=f"write nothing: exit 1 if the page differs from {source}")
    args = parser.parse_args(argv)
    try:
        text = render()
    except AlgoswapError as exc:
        print(f"{module}: error: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if stale(args.path, text):
            print(f"{args.path} is stale: refresh it with {prog} {page}", file=sys.stderr)
            return 1
        return 0
    args.path.write_text(text, encoding="utf-8")
    print(f"wrote {args.path}: {len(text.splitlines())} lines, {len(text.encode())} bytes")
    return 0
