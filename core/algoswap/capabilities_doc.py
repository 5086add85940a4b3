"""docs/capabilities.md: the capability tables of the repository's own plugins, generated from what they declare.

    python -m algoswap.capabilities_doc docs/capabilities.md    # write the page
    python -m algoswap.capabilities_doc --check docs/capabilities.md    # exit 1 if it is stale

The page is the same on every machine that has the repository's plugins installed: the registry is
built afresh from their five distributions alone (``ALGOSWAP_PLUGINS``; a user's other plugins, the
environment's plugin filters and remembered plugin faults play no part), and the tables come from
``build(..., declared=True)``: no backend is probed and nothing is checked for import problems, so a
machine without CUDA or a Mac, or a CPU that oneDNN runs no bfloat16 on, changes nothing.
tests/test_capabilities_doc.py fails when the committed page is stale.
"""

from __future__ import annotations

import sys
import tempfile
from importlib import metadata
from typing import Sequence

from . import _generated_page
from ._capabilities import build
from ._errors import AlgoswapError
from ._registry import Registry
from ._settings import ENV_ALLOW, ENV_STATE, ENV_STRICT

PLUGIN_DISTRIBUTIONS = ("algoswap-numpy", "algoswap-dnnl", "algoswap-sycl", "algoswap-cuda", "algoswap-metal", "algoswap-dist")
COMMAND = "python -m algoswap.capabilities_doc docs/capabilities.md"


class MissingPlugins(AlgoswapError):
    """One of the repository's plugin distributions is not installed: the page would miss its tables."""


def missing_distributions() -> list[str]:
    """The repository's plugin distributions that are not installed here."""
    missing = []
    for name in PLUGIN_DISTRIBUTIONS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def declared_registry() -> Registry:
    """A registry of the repository's plugins alone, loaded strictly (a plugin that fails is an error,
    never a page without its tables) with an empty fault memory."""
    from ._plugins import PluginLoader

    missing = missing_distributions()
    if missing:
        raise MissingPlugins(f"not installed: {', '.join(missing)} (the page documents every plugin of the repository; "
                             "`make setup` installs them)")
    registry = Registry()
    with tempfile.TemporaryDirectory(prefix="algoswap-caps-") as state:
        env = {ENV_ALLOW: ",".join(PLUGIN_DISTRIBUTIONS), ENV_STATE: state, ENV_STRICT: "1"}
        PluginLoader(registry, env).discover()
    return registry


def render(registry: Registry | None = None) -> str:
    """The page's text."""
    registry = declared_registry() if registry is None else registry
    matrix = build(registry, declared=True, distributions=PLUGIN_DISTRIBUTIONS)
    backends = ["| backend | distribution | device | memory |", "|---|---|---|---|"] + [
        f"| {name} | {status.distribution} | {status.device} | {status.memory} |" for name, status in matrix.backends.items()]
    counts = sum(c.supported for t in matrix.tables.values() for cells in t.rows.values() for c in cells.values())
    refusals = sum(bool(c.reason) for t in matrix.tables.values() for cells in t.rows.values() for c in cells.values())
    header = [
        "# Capabilities",
        "",
        "<!-- Generated from the registry: do not edit by hand. Refresh it with",
        f"     {COMMAND}",
        "     (tests/test_capabilities_doc.py fails while it is stale). -->",
        "",
        "What the repository's plugins **declare** for each op: every registered implementation",
        "(`backend:algorithm`) with its dtypes, the memory layout it takes host arrays in, how it treats NaN and",
        "infinity, its priority (the highest that serves a call is chosen by default) and its description (where",
        "it gives none, in italics the kernel name it reports), then the algorithms a backend declares it does not",
        "offer, with the reason. Whether a backend can run on a given machine is not shown: that is",
        "`algoswap caps --available` there (without an NVIDIA GPU the CUDA backend is unavailable, off a Mac",
        "the mps and metal backends; a CPU without bfloat16 instructions refuses the oneDNN bfloat16 calls at",
        "run time).",
        "",
        "- layout: `contiguous` (C-contiguous arrays; others are copied first), `any` (any strides),",
        "  `channels_last` (like `any`, and 4-D activations preferred in NHWC order).",
        "- NaN: `exact` (NaN and infinity exactly where PyTorch has them) or `spreads` (a NaN or infinite input",
        "  may also make other outputs NaN, as FFT and Winograd convolutions do; none is ever lost).",
        "",
        f"{len(matrix.tables)} ops, {counts} implementations, {refusals} declared unsupported, over these backends:",
        "",
    ]
    ops = [op for op, table in matrix.tables.items() if not any(c.supported or c.reason for cells in table.rows.values()
                                                               for c in cells.values())]
    absent = ["", f"Ops no backend of these plugins declares: {', '.join(ops)}."] if ops else []
    return "\n".join(header + backends + absent + ["", "## Ops", "", matrix.to_declared_markdown(), ""])


def main(argv: Sequence[str] | None = None) -> int:
    return _generated_page.main(argv, module="algoswap.capabilities_doc", doc=__doc__, page="docs/capabilities.md", source="the registry's",
                                render=render)


if __name__ == "__main__":
    sys.exit(main())
