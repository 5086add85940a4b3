"""A backend's module of one op family: which family it mirrors, and the function of each op in it.

Backend modules are named like the core's spec modules (``algoswap_cuda.activation`` mirrors
``algoswap._specs.activation``); in it, the function of an op has the op's name, with a trailing
underscore where that name is a Python keyword or builtin (``slicing.slice_``).
"""

from __future__ import annotations

import builtins
import importlib
import keyword
from types import MappingProxyType, ModuleType
from typing import Any, Callable, Mapping, Union

from ._errors import RegistrationError
from ._names import ModuleNames
from ._records import RefLike
from ._specs import FAMILIES

Options = Mapping[str, Any]
Overrides = Union[Mapping[str, Options], Callable[[str], Options], None]
_NONE: Options = MappingProxyType({})


def family_of(module: ModuleType | str) -> tuple[str, str]:
    """(the module's dotted name, the family its last part names); an error for any other name."""
    if not isinstance(module, (ModuleType, str)):
        raise RegistrationError(f"add_family: expected a module or its dotted name, got {type(module).__name__}")
    name = module.__name__ if isinstance(module, ModuleType) else module
    family = name.rpartition(".")[2]
    if family not in FAMILIES:
        raise RegistrationError(f"add_family: module {name!r} is not named after an op family "
                                f"(its last part must be one of {', '.join(FAMILIES)})")
    return name, family


def function_names(op: str) -> tuple[str, ...]:
    """The names ``op``'s function may have in its family's module, in the order they are tried."""
    shadows = keyword.iskeyword(op) or hasattr(builtins, op)
    return (f"{op}_", op) if shadows else (op,)


def find_functions(module: ModuleType | str, ops: tuple[str, ...], names: ModuleNames) -> dict[str, RefLike]:
    """Each op of ``ops`` that ``module`` has a function for -> that function: the module's attribute,
    or for a module given by name, "module:name", found without importing the module where its code
    can be read (it is imported where it cannot)."""
    if isinstance(module, str):
        bound = _bound_names(module, ops, names)
        if bound is not None:
            return {op: f"{module}:{name}" for op in ops if (name := _first_name(op, bound.__contains__))}
        module = _import(module)
    loaded = module
    return {op: getattr(loaded, name) for op in ops if (name := _first_name(op, lambda n: hasattr(loaded, n)))}


def _bound_names(module: str, ops: tuple[str, ...], names: ModuleNames) -> set[str] | None:
    """The names ``module`` binds among those the functions of ``ops`` may have; None where its code cannot tell."""
    try:
        answers = {name: names.binds(module, name) for op in ops for name in function_names(op)}
    except ModuleNotFoundError as exc:
        raise RegistrationError(f"add_family: {exc}") from None
    return None if None in answers.values() else {name for name, bound in answers.items() if bound}


def _first_name(op: str, has: Callable[[str], bool]) -> str | None:
    return next((name for name in function_names(op) if has(name)), None)


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise RegistrationError(f"add_family: the names of {module!r} cannot be read from its code, and it does not "
                                f"import: {type(exc).__name__}: {exc}") from None


def options_for(overrides: Overrides) -> Callable[[str], Options]:
    """Keywords for one op, from a mapping op -> keywords (naming ops of any family: one mapping may
    serve several families) or a function of the op's name."""
    if overrides is None:
        return lambda op: _NONE
    if callable(overrides):
        return overrides
    family_ops = {op for ops in FAMILIES.values() for op in ops}
    strangers = [op for op in overrides if op not in family_ops]
    if strangers:
        raise RegistrationError(f"add_family: overrides name ops of no family: {', '.join(map(repr, strangers))}")
    return lambda op: overrides.get(op, _NONE)
