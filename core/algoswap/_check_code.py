"""What ``check-plugin`` learns from a plugin's resolved code: whether an implementation's signature
takes the call the runner makes (the op's inputs by position, its attributes by keyword), and which
attribute and input names a ``supports()`` predicate reads (``call.attrs["x"]``, ``call.attrs.get("x")``,
``call.shape("x")``). Code whose signature or source cannot be read (compiled functions) is not judged."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Callable

from ._ref import Ref
from ._spec import OpSpec


def signature_problem(fn: Callable[..., Any], spec: OpSpec) -> str | None:
    """Why ``fn`` cannot be called as the runner calls an implementation of ``spec``'s op, or None."""
    target, extra = (fn.resolve(), fn.args) if isinstance(fn, Ref) else (fn, ())
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or compiled function without a readable signature
        return None
    count = len(spec.inputs) + (1 if spec.inputs and spec.inputs[-1].variadic else 0)
    attrs = [attr.name for attr in spec.attrs]
    try:
        signature.bind(*([None] * count), *extra, **{name: None for name in attrs})
    except TypeError as exc:
        inputs = ", ".join(spec.input_names) or "none"
        return (f"{_name_of(target)}{signature} cannot take a {spec.name} call: {_mismatch(signature, attrs, spec.name, exc)} "
                f"(expected the inputs {inputs} by position{', then ' + repr(extra) if extra else ''} and the "
                f"attributes {', '.join(attrs) or 'none'} by keyword)")
    return None


def _mismatch(signature: inspect.Signature, attrs: list[str], op: str, error: TypeError) -> str:
    """The attributes ``op`` passes that the signature does not take, and the names it requires that ``op``
    does not pass; Python's own words where the mismatch is elsewhere (the count of inputs)."""
    parameters = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        untaken = []
    else:
        untaken = [name for name in attrs if name not in signature.parameters]
    required = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in attrs]
    parts = [f"it does not take {op}'s attribute{'s' if len(untaken) > 1 else ''} {', '.join(map(repr, untaken))}"] if untaken else []
    parts += [f"it requires {', '.join(map(repr, required))}, which {op} does not pass"] if required else []
    return "; ".join(parts) or str(error)


def names_read(predicate: Callable[..., Any]) -> tuple[set[str], set[str]]:
    """(attribute names, input names) the predicate's own source reads from its call, as literals."""
    target = predicate.resolve() if isinstance(predicate, Ref) else predicate
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):  # no source, or a lambda inside a larger expression
        return set(), set()
    attrs: set[str] = set()
    inputs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_attrs(node.value):
            attrs.update(_literal(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr == "get" and _is_attrs(node.func.value):
                attrs.update(_literal(node.args[0]))
            elif node.func.attr == "shape":
                inputs.update(_literal(node.args[0]))
    return attrs, inputs


def _is_attrs(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "attrs"


def _literal(node: ast.AST) -> set[str]:
    return {node.value} if isinstance(node, ast.Constant) and isinstance(node.value, str) else set()


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)
