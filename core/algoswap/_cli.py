"""The ``algoswap`` command: ``backends``, ``caps``, ``ops``, ``retry``, ``check-plugin``, ``demo`` and ``new-plugin``."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import sys
from typing import Any, Iterator, Sequence

from ._cli_args import UsageError, positive_int
from ._cli_tables import add_caps, add_ops
from ._version import API_VERSION, __version__

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a program its reader stopped listening to


def _status_text(status: str, reason: str | None) -> str:
    """A status and its reason, the status said once (a crashed backend's reason begins with "crashed: ")."""
    if not reason:
        return status
    return reason if reason.startswith(f"{status}: ") else f"{status}: {reason}"


def _backend_rows() -> list[dict[str, Any]]:
    from ._global import get_registry

    registry = get_registry()
    rows = []
    for plugin in registry.plugins:
        if plugin.status != "loaded" or not plugin.backends:
            rows.append({"backend": None, "plugin": plugin.name, "distribution": plugin.distribution,
                         "version": plugin.version, "device": None, "memory": None,
                         "status": plugin.status, "reason": plugin.error})
            continue
        for name in plugin.backends:
            record = registry.backends[name]
            available = record.availability()
            rows.append({"backend": name, "plugin": plugin.name, "distribution": plugin.distribution,
                         "version": plugin.version, "device": record.device_in_use, "memory": record.memory.name,
                         "status": record.status, "reason": None if available is True else str(available)})
    return rows


def cmd_backends(args: argparse.Namespace) -> int:
    from ._global import get_registry

    rows = _backend_rows()
    if args.json:
        print(json.dumps({"algoswap_version": __version__, "api_version": API_VERSION, "backends": rows}, indent=2))
        return 0
    if not rows:
        print("no plugins found (entry-point group 'algoswap.backends'); install one, e.g. pip install ./plugins/numpy_backend")
        return 0
    header = ("backend", "distribution", "version", "device", "memory", "status")
    table = [header] + [
        (r["backend"] or f"[{r['plugin']}]", r["distribution"], r["version"], r["device"] or "-", r["memory"] or "-",
         _status_text(r["status"], r["reason"]))
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(5)]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5])
    if args.verbose:
        _print_family_gaps()
        for plugin in get_registry().plugins:
            if plugin.trace:
                print(f"\n--- {plugin.name} ({plugin.owner}) ---\n{plugin.trace}", end="")
    return 0


def _print_family_gaps() -> None:
    """The ops of the families each backend registered (``add_family``) that it has no implementation of."""
    from ._global import get_registry

    registry = get_registry()
    gaps = [(name, family, ops) for name in registry.backends for family, ops in registry.missing_ops(name).items()]
    if gaps:
        print("\nops of their families that backends do not implement (nor declare unsupported):")
    for name, family, ops in gaps:
        print(f"  {name}: {family} ({registry.families(name)[family]} has no function for {', '.join(ops)})")


def cmd_retry(args: argparse.Namespace) -> int:
    from ._api import retry_plugins

    _check_retry_names(args.names)
    cleared = retry_plugins(*args.names)
    if not cleared:
        print("nothing to retry: no plugin is remembered as crashed or timed out" + (f" among {', '.join(args.names)}" if args.names else ""))
        return 0
    print(f"forgot the faults of {', '.join(cleared)}: the next command imports and probes them again")
    return 0


def _check_retry_names(names: Sequence[str]) -> None:
    """Each name must be an installed plugin's (entry point or distribution), a remembered fault's, or a
    loaded backend's; a name that is none of these is a usage error listing the installed plugins. The
    plugins are found without importing them; discovery runs only to look a name up among the backends."""
    from ._faults import FaultLog
    from ._plugins import _entry_points, _record_of
    from ._registry import suggest
    from ._settings import normalise, state_directory

    installed = [_record_of(entry_point) for entry_point in _entry_points()]
    faults = FaultLog(state_directory(os.environ))
    faults.collect()
    known = {"all", "*"} | {normalise(n) for r in installed for n in (r.name, r.distribution) if n}
    known |= {normalise(n) for f in faults.faults() for n in (f.plugin, f.distribution, f.backend) if n}
    unknown = [name for name in names if normalise(name) not in known]
    if unknown:
        from ._global import get_registry

        backends = {normalise(b) for b in get_registry().backends}
        unknown = [name for name in unknown if normalise(name) not in backends]
    if unknown:
        listing = ", ".join(f"{r.name} ({r.distribution})" if r.distribution else r.name for r in installed) or "none"
        candidates = [n for r in installed for n in (r.name, r.distribution) if n]
        raise UsageError(f"argument NAME: unknown plugin {unknown[0]!r} (known plugins: {listing}){suggest(unknown[0], candidates)}")


def cmd_check_plugin(args: argparse.Namespace) -> int:
    from ._check import check_plugin

    if args.module:
        import importlib

        from ._api import register_plugin

        try:
            plugin = importlib.import_module(args.module)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the plugin's failure is a problem it has, never a traceback
            print(f"problem: plugin {args.name!r}: module: --module {args.module!r} does not import: "
                  f"{type(exc).__name__}: {exc}\n1 problem found")
            return 1
        register_plugin(plugin, name=args.name)
    report = check_plugin(args.name)
    print(report.to_text())
    return 0 if report.ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    _check_model(args.model)
    return run_demo(args.model, args.batch, args.small, args.repeats, matrix=args.matrix, slow=args.slow)


def _check_model(name: str) -> None:
    """An unknown model is a usage error before the demo prints anything (without torch, the demo says
    how to install it instead)."""
    if importlib.util.find_spec("torch") is None:
        return
    from . import zoo
    from ._zoo_foreign import check_foreign, is_foreign

    try:
        zoo.input_shape(name)
        if is_foreign(name):
            check_foreign(name)
    except ValueError as exc:
        raise UsageError(f"argument --model: {exc}") from None


def cmd_new_plugin(args: argparse.Namespace) -> int:
    from ._scaffold import new_plugin

    if not os.path.isdir(args.dir):
        raise UsageError(f"argument --dir: {args.dir!r} is not a folder")
    try:
        target = new_plugin(args.name, cpp=args.cpp, directory=args.dir)
    except OSError as exc:
        raise UsageError(f"argument --dir: cannot write the plugin into {args.dir!r}: {exc.strerror or exc}") from None
    folder = str(target) if target.is_absolute() else os.path.join(".", target)  # a path for pip, not a name on PyPI
    kind = "C++ (pybind11, scikit-build-core)" if args.cpp else "NumPy"
    print(f"wrote {folder}/: the plugin {args.name!r} with conv2d algorithm '{args.name}:direct' ({kind}); next:")
    for command in (f"pip install {folder}", f"algoswap check-plugin {args.name}", f"python -m algoswap.testing {args.name}"):
        print(f"  {command}")
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="algoswap", description="Registry of deep-learning operator implementations.")
    main.add_argument("--version", action="version", version=f"algoswap {__version__} (plugin API {API_VERSION})")
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_backends(sub)
    add_caps(sub)
    add_ops(sub)
    _add_retry(sub)
    _add_check_plugin(sub)
    _add_demo(sub)
    _add_new_plugin(sub)
    return main


def _add_backends(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    backends = sub.add_parser("backends", help="installed backends and plugin status")
    backends.add_argument("--json", action="store_true", help="machine-readable output")
    backends.add_argument("--verbose", "-v", action="store_true", help="also the ops of their families backends lack, and tracebacks of broken plugins")
    backends.set_defaults(run=cmd_backends, parser=backends)


def _add_retry(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    retry = sub.add_parser("retry", help="import again plugins skipped since they crashed or timed out in an earlier process "
                                           "or in the check of a new plugin")
    retry.add_argument("names", nargs="*", metavar="NAME", help="plugin, distribution or backend names (default: every one)")
    retry.set_defaults(run=cmd_retry, parser=retry)


def _add_check_plugin(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    check = sub.add_parser("check-plugin", help="what would fail in a plugin: references, names, probe time, API version")
    check.add_argument("name", metavar="NAME", help="the plugin's entry-point or distribution name, or a backend it declares")
    check.add_argument("--module", help="a plugin not installed: import this module and register it as NAME first")
    check.set_defaults(run=cmd_check_plugin, parser=check)


def _add_demo(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser("demo", help="a zoo model's convolutions swapped algorithm by algorithm and checked against torch, "
                                       "the backends, explain of the fastest run")
    demo.add_argument("--model", default="resnet18", help="a zoo model (convnet, alexnet, vgg16, resnet18, resnet50, "
                                                          "mobilenet, squeezenet), or torchvision:NAME / timm:NAME")
    demo.add_argument("--batch", type=positive_int, default=1, metavar="N", help="images per input batch (default 1)")
    demo.add_argument("--small", action="store_true", help="the model's reduced input size (quicker)")
    demo.add_argument("--repeats", type=positive_int, default=3, metavar="N", help="timed runs per algorithm (median; default 3)")
    demo.add_argument("--matrix", action="store_true", help="also print the capability matrix (the summary of `algoswap caps`)")
    demo.add_argument("--slow", action="store_true", help="also run the slow reference algorithms (numpy:fft), skipped by default")
    demo.set_defaults(run=cmd_demo, parser=demo)


def _add_new_plugin(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    new = sub.add_parser("new-plugin", help="write a new plugin distribution algoswap-NAME (conv2d 'NAME:direct'), ready to install")
    new.add_argument("name", metavar="NAME", help="the backend's name: a lower-case identifier ([a-z][a-z0-9_]*) no installed plugin has")
    new.add_argument("--cpp", action="store_true", help="a C++ extension (pybind11, scikit-build-core, OpenMP) instead of NumPy")
    new.add_argument("--dir", default=".", help="the folder to write algoswap-NAME/ into (default: the current one)")
    new.set_defaults(run=cmd_new_plugin, parser=new)


def quiet_openmp_spinning() -> None:
    """Shorten libgomp's busy-wait before torch loads it: torch's idle OpenMP threads otherwise spin
    for ~100 ms after each torch op, starving host backends' BLAS threads (measured: ResNet-18 with
    numpy convolutions 182 ms -> 44 ms on 2 cores; torch alone unchanged). Users' own value wins."""
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")


class _Warnings(logging.StreamHandler):  # type: ignore[type-arg]
    """algoswap's warnings (``_log``: a plugin skipped, an unknown name in ALGOSWAP_PLUGINS) on stderr."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setLevel(logging.WARNING)
        self.setFormatter(logging.Formatter("algoswap: warning: %(message)s"))


@contextlib.contextmanager
def _warnings_shown() -> Iterator[None]:
    """Show the library's warnings while the command runs, unless the application logs them itself
    (or an enclosing ``main``, as the demo's, already does)."""
    log = logging.getLogger("algoswap")
    configured = logging.getLogger().handlers or any(not isinstance(h, logging.NullHandler) for h in log.handlers)
    handler = None if configured else _Warnings()
    if handler is not None:
        log.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            log.removeHandler(handler)


def _stop_writing_stdout() -> None:
    """The reader of stdout is gone (``algoswap caps | head``): point stdout at /dev/null, so that
    nothing else, the interpreter's last flush included, fails on it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; 0 when it worked, 1 when what it reports is a problem, 2 for a usage error
    (argparse's convention); ``SystemExit(141)`` as soon as the reader of its output stops reading."""
    quiet_openmp_spinning()
    try:
        with _warnings_shown():
            status = _run(argv)
            sys.stdout.flush()  # here, not at exit, where a closed pipe would be reported as an ignored exception
            return status
    except BrokenPipeError:
        _stop_writing_stdout()
        raise SystemExit(SIGPIPE_STATUS) from None  # also out of the demo, which calls main for its first part


def _run(argv: Sequence[str] | None) -> int:
    from ._errors import AlgoswapError

    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as exc:
        args.parser.error(str(exc))  # exits with status 2
        raise
    except AlgoswapError as exc:
        print(f"algoswap: error: {exc}", file=sys.stderr)
        return 2
