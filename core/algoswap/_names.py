"""Which names a module binds, learnt without running it, so that a plugin's "module:attribute"
references are checked before its heavy library (CuPy, dpctl, a compiled extension) is imported.

A module already imported is asked directly. Otherwise its compiled code is read through its
loader (the ``__pycache__`` file the import will use, else the source compiled) and the names its
top level stores are collected. Where that cannot tell (no Python source, ``from x import *``, a
module ``__getattr__``), the answer is "unknown", and the reference is found out at its first use.
"""

from __future__ import annotations

import dis
import importlib.util
import sys
from types import CodeType

_STORE_NAME = dis.opmap["STORE_NAME"]
_EXTENDED_ARG = dis.EXTENDED_ARG


class ModuleNames:
    """What each module binds, remembered (one index per backend: a registry's own view, since
    ``sys.path`` may change between registries)."""

    def __init__(self) -> None:
        self._bound: dict[str, frozenset[str] | None | ModuleNotFoundError] = {}

    def binds(self, module: str, name: str) -> bool | None:
        """Whether ``module`` binds ``name`` at its top level (None: it cannot be told unimported);
        ModuleNotFoundError if there is no such module."""
        loaded = sys.modules.get(module)
        if loaded is not None:
            return hasattr(loaded, name)
        bound = self.bound(module)
        if isinstance(bound, ModuleNotFoundError):
            raise bound
        return None if bound is None else name in bound

    def problem(self, target: str) -> Exception | None:
        """Why the reference ``"module:attribute"`` cannot resolve (a ModuleNotFoundError or an
        AttributeError, as its import would raise), or None if it may."""
        module, _, attribute = target.partition(":")
        first = attribute.split(".")[0]
        try:
            found = self.binds(module, first) if first else True
        except ModuleNotFoundError as exc:
            return exc
        return None if found is not False else AttributeError(f"module {module!r} has no attribute {first!r}")

    def bound(self, module: str) -> frozenset[str] | None | ModuleNotFoundError:
        """The names ``module``'s code stores at its top level, read without running it (None: its
        code cannot tell; a ModuleNotFoundError if there is no such module)."""
        if module not in self._bound:
            self._bound[module] = _read(module)
        return self._bound[module]


def _read(module: str) -> frozenset[str] | None | ModuleNotFoundError:
    try:
        spec = importlib.util.find_spec(module)
    except Exception:  # a parent package is missing or fails to import
        spec = None
    if spec is None:
        return ModuleNotFoundError(f"No module named {module!r}", name=module)
    get_code = getattr(spec.loader, "get_code", None)
    try:
        code = get_code(spec.name) if get_code is not None else None
    except Exception:  # unreadable or not valid Python: its import will say why
        return None
    if not isinstance(code, CodeType) or ("*",) in code.co_consts:
        return None
    names = stored_names(code)
    return None if "__getattr__" in names else names


def stored_names(code: CodeType) -> frozenset[str]:
    """The names a module's top-level code stores (definitions, assignments, imports, in any branch)."""
    raw = code.co_code
    ops, args = raw[0::2], raw[1::2]
    names = set()
    at = ops.find(_STORE_NAME)
    while at >= 0:
        index, before, shift = args[at], at - 1, 8
        while before >= 0 and ops[before] == _EXTENDED_ARG:
            index |= args[before] << shift
            before, shift = before - 1, shift + 8
        names.add(code.co_names[index])
        at = ops.find(_STORE_NAME, at + 1)
    return frozenset(names)
