"""``python -m algoswap.testing BACKEND [BACKEND ...] [--seed N] [--ops OP ...] [-x]``: the conformance kit
on the named backends; exit status 0 when every check passes, 1 otherwise."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import algoswap

from ._kit import Check, Failure, fresh_seed, run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m algoswap.testing", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("backends", nargs="+", metavar="BACKEND", help="the backends whose implementations are checked")
    parser.add_argument("--seed", type=int, help="the seed of the random inputs (default: a fresh one, printed)")
    parser.add_argument("--ops", nargs="+", metavar="OP", help="check only these ops")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    return parser


def _show(check: Check, failure: Failure | None) -> None:
    print(f"{'FAILED' if failure else 'passed'} {check.id}", flush=True)
    if failure is not None:
        print(failure, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seed = fresh_seed() if args.seed is None else args.seed
    print(f"algoswap.testing on {', '.join(args.backends)}, seed {seed}", flush=True)
    try:
        report = run(args.backends, ops=args.ops, seed=seed, first_failure=args.exitfirst, progress=_show)
    except algoswap.AlgoswapError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
