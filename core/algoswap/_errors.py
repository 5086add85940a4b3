"""Exceptions raised by algoswap: each names the op, the argument, what was given and expected."""

from __future__ import annotations

from typing import Any


class AlgoswapError(Exception):
    """Base class of every error algoswap raises on purpose."""


class OpArgumentError(AlgoswapError, ValueError):
    """An op was called with an attribute or input that its spec refuses."""

    def __init__(self, op: str, argument: str, given: Any, expected: str) -> None:
        self.op = op
        self.argument = argument
        self.given = given
        self.expected = expected
        super().__init__(f"{op}: argument '{argument}' got {_show(given)}; expected {expected}")


class OpDtypeError(OpArgumentError, TypeError):
    """An input has a dtype the op (or the chosen implementation) does not accept."""


class OutputTooLargeError(OpArgumentError, MemoryError):
    """A call whose output alone would need more memory than the machine has (refused before anything runs)."""


class ImplementationError(AlgoswapError, RuntimeError):
    """An implementation broke its contract: its result is not the array the op's spec says (shape,
    dtype, memory space), or it ran out of memory. The message names the implementation and its
    distribution; ``implementation`` is "backend:algorithm"."""

    def __init__(self, message: str, implementation: str) -> None:
        self.implementation = implementation
        super().__init__(message)


class ImplementationMemoryError(ImplementationError, MemoryError):
    """An implementation raised MemoryError (or C++'s std::bad_alloc): the message names the op,
    the implementation and the shapes."""


class NoImplementationError(AlgoswapError, LookupError):
    """No registered implementation can serve a call; the message lists every candidate."""

    def __init__(self, message: str, rejected: tuple[tuple[str, str], ...] = ()) -> None:
        self.rejected = rejected
        super().__init__(message)


class SelectorError(AlgoswapError, ValueError):
    """A selector (the ``algorithm=`` argument of the swap API and the executor) that does not fit
    the model: wrong length, an unknown layer, node or op, a bad or unsupported choice. The message
    names the layer or node."""


class PluginError(AlgoswapError):
    """A plugin failed to load (raised in strict mode; otherwise it is reported), an implementation's
    ``"module:attribute"`` reference cannot be imported when used, or a plugin setting is invalid."""


class RegistrationError(AlgoswapError, ValueError):
    """A plugin made an invalid registration call (bad name, unknown op, missing backend)."""


class InvalidSpec(Exception):
    """Raised inside attribute converters and shape rules; the core adds the op name."""

    def __init__(self, argument: str, given: Any, expected: str) -> None:
        self.argument = argument
        self.given = given
        self.expected = expected
        super().__init__(f"argument '{argument}' got {_show(given)}; expected {expected}")


def _show(value: Any) -> str:
    """Values as repr; descriptions (strings with spaces, like "shape (1, 2)") as they are."""
    text = value if isinstance(value, str) and " " in value else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
