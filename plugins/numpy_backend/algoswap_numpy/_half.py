"""Half precision (float16, bfloat16) on the reference: every float op computes in float32 and rounds
its result once to the input's dtype, as oneDNN and cuDNN accumulate half precision in float32.

The core's wrapper (``algoswap.in_float32``) serves every op; ``widened_family`` applies it to a family
module's functions of the ops that compute (not to data movement, which keeps any dtype as it is), with
the inputs an op updates in place (its spec's ``in_place``) written back. float32 and float64 calls (the
oracle path of algoswap.testing) run the function itself, untouched.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from algoswap import FAMILIES, in_float32


def widened_family(module: ModuleType, computes: Callable[[str], bool], spec: Callable[[str], Any]) -> ModuleType:
    """``module`` (a family module) as ``add_family`` reads it: the functions of its ops for which
    ``computes(op)`` holds computed in float32 for the half precisions, everything else as it is
    (``spec(op)``: the op's spec, for the inputs it updates in place)."""
    family = module.__name__.rpartition(".")[2]
    view = ModuleType(module.__name__, module.__doc__)
    view.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__doc__")})
    for op in FAMILIES[family]:
        for name in (op, f"{op}_"):  # slice_: an op named like a builtin
            if computes(op) and callable(vars(module).get(name)):
                names = spec(op).input_names
                updated = tuple(names.index(updates) for updates in spec(op).in_place)
                setattr(view, name, in_float32(getattr(module, name), updated=updated))
    return view
