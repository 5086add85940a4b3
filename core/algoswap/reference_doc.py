"""docs/reference.md: the plugin-author reference, generated from the docstrings and signatures of the code.

    python -m algoswap.reference_doc docs/reference.md    # write the page
    python -m algoswap.reference_doc --check docs/reference.md    # exit 1 if it is stale

The page holds every hook of ``algoswap.hookspecs`` (in source order), every ``Registrar`` method a plugin
calls in ``algoswap_register`` (``REGISTRAR_METHODS``; ``REGISTRAR_INTERNAL`` lists those the core calls, and
tests/test_reference_doc.py fails when a public method is in neither), and the public types and constants a
plugin uses: their signatures (with the type hints as written in the source), fields and docstrings, read
with ``inspect`` and ``dataclasses``. The docstrings *are* the reference: to change the page, change them, then
refresh it. Nothing is imported but the core (no plugin, no torch), so the page is the same on every machine.
tests/test_reference_doc.py fails when the committed page is stale.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from types import FunctionType
from typing import Any, Callable, Sequence

from . import _generated_page

COMMAND = "python -m algoswap.reference_doc docs/reference.md"

# What a plugin calls on the registrar, in the order a registration usually calls it.
REGISTRAR_METHODS = ("add_backend", "add_implementation", "add_family", "declare_unsupported", "add_op", "spec")
# Public members of Registrar the core uses (plugin loading, ownership), not plugins.
REGISTRAR_INTERNAL = ("plugin", "reference", "claims", "validate")
# The public types a plugin meets, with the members (beyond a dataclass's fields) that concern it.
TYPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MemorySpace", ("is_host", "upload", "download")),
    ("Available", ()),
    ("Ref", ("resolve",)),
    ("OpCall", ("shape",)),
    ("BackendRecord", ("owner", "availability", "status", "device_in_use")),
    ("ImplRecord", ("key", "qualified", "owner", "check", "kernel_name")),
    ("OpSpec", ()),
    ("Input", ()),
    ("Attr", ()),
)
ALIASES = (  # (module, alias, what it means to a plugin author)
    ("_records", "RefLike", "a callable, an `algoswap.Ref`, or a `\"module:attribute\"` string imported on first use"),
    ("_records", "Probe", "an availability probe: no argument; True, `algoswap.Available(device)` or a reason"),
    ("_records", "Supports", "a `supports` predicate: given the `OpCall`, True or a sentence saying why not"),
    ("_families", "Overrides", "`add_family`'s per-op keywords: a mapping op → keywords, or a function of the op's name"),
    ("_families", "Options", "keywords of `add_implementation`, by name"),
)
CONSTANTS = ("API_VERSION", "HOST", "FLOAT_DTYPES", "INT_DTYPES", "ALL_DTYPES", "FAMILIES")
WIDTH = 100  # a signature longer than this is written one parameter a line


class _Text:
    """A default value shown as given text (``repr`` of some defaults holds addresses or set orders)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _value(value: Any) -> str:
    """A default value as the page shows it: stable across processes and machines."""
    import algoswap

    if value is algoswap.HOST:
        return "algoswap.HOST"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({{{', '.join(repr(v) for v in sorted(value))}}})"
    if isinstance(value, FunctionType):
        return value.__name__  # a lambda too: "<lambda>"
    if dataclasses.is_dataclass(value) or getattr(type(value), "__repr__") is getattr(object, "__repr__"):  # an address
        return type(value).__name__
    return repr(value)


def _signature(obj: Callable[..., Any], name: str, drop_self: bool = True) -> str:
    """``name(params) -> return``: annotations as written in the source, defaults made stable."""
    signature = inspect.signature(obj)
    parameters = []
    for p in signature.parameters.values():
        if p.default is not p.empty:
            p = p.replace(default=_Text(_value(p.default)))
        if p.annotation is not p.empty:
            p = p.replace(annotation=_Text(_annotation(p.annotation)))
        parameters.append(p)
    if drop_self and parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    returns = signature.return_annotation
    signature = signature.replace(parameters=parameters, return_annotation=signature.empty if returns is signature.empty
                                  else _Text(_annotation(returns)))
    text = f"{name}{signature}"
    if len(text) <= WIDTH:
        return text
    params = [str(p) for p in parameters]
    # a keyword-only marker where inspect would print one
    shown, star = [], False
    for p, text_p in zip(parameters, params):
        if p.kind is p.KEYWORD_ONLY and not star:
            shown.append("*")
            star = True
        if p.kind is p.VAR_POSITIONAL:
            star = True
        shown.append(text_p)
    returns = "" if signature.return_annotation is signature.empty else f" -> {signature.return_annotation!r}"
    return name + "(\n" + "".join(f"    {p},\n" for p in shown) + ")" + returns


def _annotation(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return text.strip("'\"")  # a forward reference written as a string


def _doc(obj: Any) -> str:
    """The docstring, dedented, or a mark the test refuses."""
    doc = obj.__doc__ if isinstance(obj, (type, FunctionType, property)) else inspect.getdoc(obj)
    return inspect.cleandoc(doc) if doc else "*(no docstring)*"


def _code(text: str) -> list[str]:
    return ["```text", text, "```"]


def _hooks() -> list[str]:
    from . import hookspecs

    out = ["## Hooks", "", "Defined in `algoswap.hookspecs`; a plugin module implements them as plain functions "
           "of the same name.", "", *inspect.cleandoc(hookspecs.__doc__ or "").splitlines(), ""]
    for name, fn in vars(hookspecs).items():
        if not (isinstance(fn, FunctionType) and name.startswith("algoswap_")):
            continue
        options = getattr(fn, f"{hookspecs.PROJECT}_spec", {})
        first = " The first non-None result is taken (`firstresult`)." if options.get("firstresult") else ""
        out += [f"### `{name}`", "", *_code(_signature(fn, name, drop_self=False)), "", _doc(fn) + first, ""]
    return out


def _registrar() -> list[str]:
    from ._registry import Registrar

    out = ["## The registrar", "",
           "The `registry` argument of `algoswap_register`, an `algoswap._registry.Registrar`:", "",
           *inspect.cleandoc(Registrar.__doc__ or "").splitlines(), ""]
    for name in REGISTRAR_METHODS:
        method = getattr(Registrar, name)
        out += [f"### `registry.{name}`", "", *_code(_signature(method, f"registry.{name}")), "", _doc(method), ""]
    return out


def public_members(cls: type) -> list[str]:
    """The public attributes a class defines itself (methods, properties), and its public dataclass fields."""
    own = [name for name in vars(cls) if not name.startswith("_")]
    fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
    return own + [name for name in fields if name not in own and not name.startswith("_")]


def _fields(cls: type) -> list[str]:
    if not dataclasses.is_dataclass(cls):
        return []
    rows = ["| field (in constructor order) | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f"`{_value(f.default)}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{_value(f.default_factory())}`"
        else:
            default = "required"
        kind = _annotation(f.type).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | {default} |")
    return rows + [""]


def _member(cls: type, name: str) -> list[str]:
    attribute = inspect.getattr_static(cls, name)
    if isinstance(attribute, property):
        assert attribute.fget is not None
        returns = inspect.signature(attribute.fget).return_annotation
        kind = "" if returns is inspect.Signature.empty else f" → `{_annotation(returns)}`"
        head, doc = f"`.{name}`{kind} (property)", _doc(attribute)
    elif isinstance(attribute, (staticmethod, classmethod)):
        raise TypeError(f"{cls.__name__}.{name}: static and class methods are not rendered")
    else:
        head, doc = f"`.{_signature(attribute, name)}`", _doc(attribute)
    lines = doc.splitlines()
    # continuation lines indented by 4: Python-Markdown keeps a later paragraph in the list item only so
    return [f"- {head}: {lines[0]}", *(f"    {line}" if line else "" for line in lines[1:])]


def _types() -> list[str]:
    import algoswap

    out = ["## Types", "", "Importable from `algoswap` (`from algoswap import MemorySpace, Ref`).", ""]
    for name, members in TYPES:
        cls = getattr(algoswap, name)
        constructor = [] if dataclasses.is_dataclass(cls) else [*_code(_signature(cls.__init__, name)), ""]
        out += [f"### `algoswap.{name}`", "", *constructor, _doc(cls), "", *_fields(cls)]
        if members:
            out += ["Members:", ""] + [line for member in members for line in [*_member(cls, member), ""]]
    return out


def _aliases() -> list[str]:
    """The type aliases the signatures above name, as the source defines them."""
    from . import _families, _records

    out = ["## Type aliases", "", "Names the signatures above use for the types of arguments.", "",
           "| alias | stands for | meaning |", "|---|---|---|"]
    for module, name, meaning in ALIASES:
        value = vars(_families if module == "_families" else _records)[name]
        shown = repr(value).replace("typing.", "").replace("algoswap._spec.", "").replace("|", "\\|")
        out.append(f"| `{name}` | `{shown}` | {meaning} |")
    return out + [""]


def _constants() -> list[str]:
    import algoswap

    out = ["## Constants", "", "| name | value |", "|---|---|"]
    for name in CONSTANTS:
        value = getattr(algoswap, name)
        if name == "FAMILIES":
            shown = "a mapping family → its ops: " + ", ".join(f"`{family}` ({len(ops)})" for family, ops in value.items())
        elif name == "HOST":
            shown = f"`MemorySpace({value.name!r}, {value.array_type!r})`: {value.description}"
        else:
            shown = f"`{value!r}`"
        out.append(f"| `algoswap.{name}` | {shown} |")
    return out + [""]


def render() -> str:
    """The page's text."""
    header = [
        "# Plugin reference",
        "",
        "<!-- Generated from the docstrings and signatures: do not edit by hand. Refresh it with",
        f"     {COMMAND}",
        "     (tests/test_reference_doc.py fails while it is stale). -->",
        "",
        "The hooks a plugin implements, the registrar methods it calls in `algoswap_register`, and the public",
        "types and constants it uses, as the code declares them: each signature with its type hints as",
        "written in the source, and each docstring, which is the contract. The [plugin-author guide](plugins.md)",
        "explains them with examples.",
        "",
    ]
    return "\n".join(header + _hooks() + _registrar() + _types() + _aliases() + _constants()).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    return _generated_page.main(argv, module="algoswap.reference_doc", doc=__doc__, page="docs/reference.md", source="the code's",
                                render=render)


if __name__ == "__main__":
    sys.exit(main())
