"""Which names a module binds, learnt without running it, so that a plugin's "module:attribute"
references are checked before its heavy library (CuPy, dpctl, a compiled extension) is imported.

A module already imported is asked directly. Otherwise its compiled code is read through its
loader (the ``__pycache__`` file the import will use, else the source compiled): the names its top
level stores, and those its functions declare ``global`` and store, are bound. Where the code may
bind other names in ways no store shows (``globals()``, ``vars()``, ``exec``, ``eval``,
``sys.modules``, ``from x import *``, a module ``__getattr__``), or there is no Python code, a name
not seen stored is "unknown", never missing, and a reference to it is found out at its first use.
"""

from __future__ import annotations

import dis
import importlib.util
import sys
from types import CodeType
from typing import NamedTuple

_STORE_NAME, _STORE_GLOBAL = dis.opmap["STORE_NAME"], dis.opmap["STORE_GLOBAL"]
_EXTENDED_ARG = dis.EXTENDED_ARG
_BINDING_BUILTINS = frozenset({"globals", "vars", "exec", "eval"})  # calls that may bind names no store shows
_LOADS = ("LOAD_NAME", "LOAD_GLOBAL")
_OWN_NAME = {("LOAD_NAME", "__name__"), ("LOAD_GLOBAL", "__name__")}


class Reading(NamedTuple):
    """What a module's code tells of the names it binds: those it stores (a function's ``global`` ones
    too, bound once it runs), and whether it can bind no other."""

    names: frozenset[str]
    complete: bool


_UNREADABLE = Reading(frozenset(), False)


class ModuleNames:
    """What each module binds, remembered (one index per backend: a registry's own view, since
    ``sys.path`` may change between registries)."""

    def __init__(self) -> None:
        self._read: dict[str, Reading | ModuleNotFoundError] = {}

    def binds(self, module: str, name: str) -> bool | None:
        """Whether ``module`` binds ``name`` at its top level (None: it cannot be told unimported);
        ModuleNotFoundError if there is no such module."""
        loaded = sys.modules.get(module)
        if loaded is not None:
            return hasattr(loaded, name)
        reading = self.reading(module)
        if isinstance(reading, ModuleNotFoundError):
            raise reading
        return True if name in reading.names else False if reading.complete else None

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
        """Every name ``module`` binds, read from its code without running it (None: its code cannot
        tell them all; a ModuleNotFoundError if there is no such module)."""
        reading = self.reading(module)
        return reading if isinstance(reading, ModuleNotFoundError) else reading.names if reading.complete else None

    def reading(self, module: str) -> Reading | ModuleNotFoundError:
        """What ``module``'s code tells of the names it binds (read once); ModuleNotFoundError if there is no such module."""
        if module not in self._read:
            self._read[module] = _read(module)
        return self._read[module]


def _read(module: str) -> Reading | ModuleNotFoundError:
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
        return _UNREADABLE
    return read_code(code) if isinstance(code, CodeType) else _UNREADABLE


def read_code(code: CodeType) -> Reading:
    """The names a module's code binds: its top level's stores and its functions' ``global`` stores;
    incomplete where it may bind others (a star import, a module ``__getattr__``, ``globals()`` ...)."""
    names, complete = set(stored_names(code)), ("*",) not in code.co_consts
    for inner in _inner_code(code):
        names |= stored_names(inner, _STORE_GLOBAL)
        complete = complete and not _binds_unseen(inner)
    return Reading(frozenset(names), complete and "__getattr__" not in names and not _binds_unseen(code))


def _inner_code(code: CodeType) -> list[CodeType]:
    """The code of every function, class body and comprehension ``code`` defines, at any depth."""
    inner = [const for const in code.co_consts if isinstance(const, CodeType)]
    return inner + [deeper for each in inner for deeper in _inner_code(each)]


def _binds_unseen(code: CodeType) -> bool:
    """Whether ``code`` calls a builtin that may bind module names (``globals()``, ``vars()``, ``exec``,
    ``eval``) or takes its own module from ``sys.modules[__name__]`` (to ``setattr`` on it)."""
    if _BINDING_BUILTINS.isdisjoint(code.co_names) and "modules" not in code.co_names:
        return False
    loads = [(i.opname, i.argval) for i in dis.get_instructions(code) if i.opname.startswith("LOAD_")]
    return any((op in _LOADS and name in _BINDING_BUILTINS) or ((op, name) == ("LOAD_ATTR", "modules") and after in _OWN_NAME)
               for (op, name), after in zip(loads, loads[1:] + [("", "")]))


def stored_names(code: CodeType, opcode: int = _STORE_NAME) -> frozenset[str]:
    """The names ``code`` stores with ``opcode`` (STORE_NAME: a module's top level stores them, in any
    branch: definitions, assignments, imports; STORE_GLOBAL: a function's ``global`` names)."""
    raw = code.co_code
    ops, args = raw[0::2], raw[1::2]
    names = set()
    at = ops.find(opcode)
    while at >= 0:
        index, before, shift = args[at], at - 1, 8
        while before >= 0 and ops[before] == _EXTENDED_ARG:
            index |= args[before] << shift
            before, shift = before - 1, shift + 8
        names.add(code.co_names[index])
        at = ops.find(opcode, at + 1)
    return frozenset(names)
