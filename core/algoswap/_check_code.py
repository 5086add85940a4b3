"""What ``check-plugin`` learns from a plugin's code: whether an implementation's signature takes the
call the runner makes (the op's inputs by position, its attributes by keyword), and which attribute
and input names a ``supports()`` predicate reads (``call.attrs["x"]``, ``call.attrs.get("x")``,
``call.shape("x")``). Both are read from the resolved function, or, for a backend that cannot run here,
from the source of the module a reference names, without importing it (``CodeReader``). Code whose
signature or source cannot be read (compiled functions, a function made at import other than by a
factory of its module) is not judged."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import textwrap
from typing import Any, Callable, Union

from ._ref import Ref
from ._spec import OpSpec

FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def signature_problem(fn: Callable[..., Any], spec: OpSpec) -> str | None:
    """Why ``fn`` cannot be called as the runner calls an implementation of ``spec``'s op, or None."""
    target, extra = (fn.resolve(), fn.args) if isinstance(fn, Ref) else (fn, ())
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or compiled function without a readable signature
        return None
    return fitting_problem(_name_of(target), signature, extra, spec)


def fitting_problem(name: str, signature: inspect.Signature, extra: tuple[Any, ...], spec: OpSpec) -> str | None:
    """Why a function ``name`` of ``signature`` cannot take a call of ``spec``'s op (then ``extra``, a
    ``Ref``'s own arguments), or None."""
    count = len(spec.inputs) + (1 if spec.inputs and spec.inputs[-1].variadic else 0)
    attrs = [attr.name for attr in spec.attrs]
    try:
        signature.bind(*([None] * count), *extra, **{name: None for name in attrs})
    except TypeError as exc:
        inputs = ", ".join(spec.input_names) or "none"
        return (f"{name}{signature} cannot take a {spec.name} call: {_mismatch(signature, attrs, spec.name, exc)} "
                f"(expected the inputs {inputs} by position{', then ' + repr(extra) if extra else ''} and the "
                f"attributes {', '.join(attrs) or 'none'} by keyword)")
    return None


class CodeReader:
    """The ``def`` behind a ``"module:attribute"`` reference, read from its module's source without
    importing the module (each module parsed once per reader)."""

    def __init__(self) -> None:
        self._trees: dict[str, ast.Module | None] = {}

    def definition(self, target: str) -> FunctionNode | None:
        """The function ``target`` names: a ``def`` at its module's top level (or aliased there: ``name =
        other``), or, for ``name = factory(...)``, the function the module's ``factory`` defines and
        returns; None where the code does not show it (no source, a nested attribute, a function made
        otherwise). A decorated ``def`` stands for itself, as ``inspect.signature`` reads a
        ``functools.wraps`` wrapper."""
        module, _, attribute = target.partition(":")
        if module not in self._trees:
            self._trees[module] = _parse(module)
        tree = self._trees[module]
        return None if tree is None or "." in attribute else _defined(tree, attribute)

    def signature_problem(self, fn: Callable[..., Any] | str, spec: OpSpec) -> str | None:
        """``signature_problem`` of an implementation, a reference judged by the signature its module's code
        declares (a callable registered as itself is asked directly: it is imported already)."""
        if not isinstance(fn, (str, Ref)):
            return signature_problem(fn, spec)
        target = fn if isinstance(fn, str) else fn.target
        node = self.definition(target)
        extra = fn.args if isinstance(fn, Ref) else ()
        return None if node is None else fitting_problem(target.partition(":")[2], written_signature(node), extra, spec)


def _parse(module: str) -> ast.Module | None:
    try:
        spec = importlib.util.find_spec(module)
        source = spec.loader.get_source(module) if spec is not None and spec.loader is not None else None  # type: ignore[attr-defined]
        return ast.parse(source) if source else None
    except Exception:  # no source, a parent package that fails to import, not valid Python: not judged
        return None


def _defined(tree: ast.Module, name: str, before: int | None = None) -> FunctionNode | None:
    """The function the last top-level statement (before the ``before``-th) binding ``name`` makes: a
    ``def``, an alias of an earlier name, or a factory's (see ``CodeReader.definition``)."""
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    statements = tree.body[:before]
    for index in range(len(statements) - 1, -1, -1):
        node = statements[index]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node  # decorated or not: inspect.signature reads a functools.wraps wrapper as the def it wraps
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            made = node.value
            if isinstance(made, ast.Name):
                return _defined(tree, made.id, index)
            if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and made.func.id in functions:
                return _returned(functions[made.func.id])
            return None
    return None


def _returned(factory: FunctionNode) -> FunctionNode | None:
    """The function ``factory`` defines in its body and returns at its end, if it does."""
    last = factory.body[-1]
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Name)):
        return None
    inner = [n for n in factory.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == last.value.id]
    return inner[-1] if inner else None


class _Written(str):
    """A default value as its source writes it (a signature shows it so)."""

    def __repr__(self) -> str:
        return str(self)


def written_signature(node: FunctionNode) -> inspect.Signature:
    """The signature a ``def`` declares (defaults as written; annotations left out)."""
    args, P = node.args, inspect.Parameter
    positional = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [(a, P.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    keyword = [(a, P.KEYWORD_ONLY, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    parameters = [P(a.arg, kind, default=_default(d)) for (a, kind), d in zip(positional, defaults)]
    parameters += [P(args.vararg.arg, P.VAR_POSITIONAL)] if args.vararg else []
    parameters += [P(a.arg, kind, default=_default(d)) for a, kind, d in keyword]
    parameters += [P(args.kwarg.arg, P.VAR_KEYWORD)] if args.kwarg else []
    return inspect.Signature(parameters)


def _default(node: ast.expr | None) -> Any:
    return inspect.Parameter.empty if node is None else _Written(ast.unparse(node))


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
    return names_in(tree)


def names_in(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(attribute names, input names) the code of ``tree`` reads from a call, as literals."""
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
