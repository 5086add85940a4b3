"""algoswap's conformance kit: every implementation of the chosen backends against the NumPy reference on
fresh random inputs across each op's attribute space, NaN/inf behaviour, gradients by finite differences
where a backend registers a gradient op, and declared refusals checked to really refuse.

Three ways in, one set of checks:

- ``python -m algoswap.testing BACKEND [BACKEND ...] [--seed N] [--ops OP ...] [-x]`` (exit status 0: all passed);
- ``pytest --pyargs algoswap.testing --algoswap-backend BACKEND`` (needs pytest: ``pip install "algoswap[testing]"``);
- ``algoswap.testing.assert_conformant("BACKEND")`` in a plugin's own test.

Each run draws fresh inputs from a seed it prints; a failure names the op, the implementation, the case
(shapes, attributes, dtype), the seed and the command that replays it. The kit needs neither torch nor pytest.
"""

from __future__ import annotations

import importlib
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._kit import Check, Failure, Report, assert_conformant, plan, run

# Loaded on first use, so that the pytest plugin (``algoswap.testing._pytest_plugin``), which every pytest run
# imports where algoswap is installed, costs no more than its own module.
_LAZY = {name: "._kit" for name in ("Check", "Failure", "Report", "assert_conformant", "plan", "run")}

__all__ = ["Check", "Failure", "Report", "assert_conformant", "plan", "run"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'algoswap.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
