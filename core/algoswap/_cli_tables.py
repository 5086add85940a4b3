"""``algoswap caps`` and ``algoswap ops``: what the registry offers, for people and for scripts."""

from __future__ import annotations

import argparse
import sys

from ._cli_args import known_name

NOTHING_AVAILABLE = 1  # as grep's "nothing matched": the command worked, but there is nothing to use


def cmd_caps(args: argparse.Namespace) -> int:
    from ._capabilities import LEGEND, SUMMARY_LEGEND, build
    from ._global import get_registry

    registry = get_registry()
    if args.op is not None:
        known_name("--op", "op", args.op, registry.ops, listed=False)
    if args.backend is not None:
        known_name("--backend", "backend", args.backend, registry.backends)
    matrix = build(registry, args.op, args.backend, available=args.available)
    if args.available and not matrix.backends:
        _say_nothing_available(build(registry, args.op, args.backend).unavailable())
        return NOTHING_AVAILABLE
    render = {"text": matrix.to_text, "summary": matrix.to_summary, "markdown": matrix.to_markdown,
              "rst": matrix.to_rst, "json": matrix.to_json}
    print(render[args.format]())
    if args.format == "summary":
        print(f"\n{SUMMARY_LEGEND}; `algoswap caps --full` for every op's table of algorithms by backend")
    elif args.format == "text":
        print(f"\n{LEGEND}")
    return 0


def _say_nothing_available(reasons: dict[str, str]) -> None:
    print("algoswap caps: no backend matching the filters is available on this machine"
          + (":" if reasons else " (no backend is installed; `algoswap backends` lists the plugins)"), file=sys.stderr)
    for name, reason in reasons.items():
        print(f"  {name}: {reason}", file=sys.stderr)


def cmd_ops(args: argparse.Namespace) -> int:
    from ._global import get_registry

    registry = get_registry()
    if args.name is not None:
        known_name("NAME", "op", args.name, registry.ops, listed=False)
    names = [args.name] if args.name else list(registry.ops)
    print("\n\n".join(registry.spec(name).describe() for name in names))
    return 0


def add_caps(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    caps = sub.add_parser("caps", help="what each backend offers per op: a summary, or every table with --full",
                          description="The capability matrix, built from what the installed plugins registered. "
                                      "By default one line per op (the algorithms each backend offers); "
                                      "--full prints every op's table of algorithms by backend.")
    caps.add_argument("--op", metavar="OP", help="only this op (`algoswap ops` lists them)")
    caps.add_argument("--backend", metavar="BACKEND", help="only this backend (`algoswap backends` lists them)")
    caps.add_argument("--available", action="store_true",
                      help="only backends available on this machine; exit status 1 if there is none")
    shape = caps.add_mutually_exclusive_group()
    shape.add_argument("--full", dest="format", action="store_const", const="text",
                       help="every op's table: algorithms by backend, with ✓/✗ marks (same as --format text)")
    shape.add_argument("--format", choices=("summary", "text", "markdown", "rst", "json"), default="summary",
                       help="summary (default): one line per op; text: the tables of --full; markdown, rst: the "
                            "tables for documents; json: the machine-readable document (schema algoswap-capabilities)")
    caps.set_defaults(run=cmd_caps, parser=caps, format="summary")


def add_ops(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    ops = sub.add_parser("ops", help="op specs: inputs, attributes, their defaults and the values they take",
                         description="The spec of each registered op: its inputs (with their ranks), its "
                                     "attributes (default, meaning, the values it takes) and what it computes.")
    ops.add_argument("name", nargs="?", metavar="NAME", help="only this op (default: every registered op)")
    ops.set_defaults(run=cmd_ops, parser=ops)

