"""What a registration call declares, checked when it is made, without importing anything: dtype
names, the form of "module:attribute" references, predicates. A mistake is a ``RegistrationError``
naming the implementation, the field, what was given and what was expected; the registration then
fails whole (the plugin is "broken", with that reason, in ``algoswap backends``), so nothing it
declared shows as offered. Whether a reference resolves is ``algoswap check-plugin``'s to find: that
imports the plugin's modules (see ``_check``)."""

from __future__ import annotations

import re
from typing import Any, Iterable

from ._errors import RegistrationError
from ._ref import Ref
from ._spec import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES

KNOWN_DTYPES = tuple(sorted({*ALL_DTYPES, *FLOAT_DTYPES, *INT_DTYPES}))
_KNOWN = frozenset(KNOWN_DTYPES)
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_REFERENCE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")


def checked_dtypes(where: str, dtypes: Iterable[str]) -> frozenset[str]:
    """``dtypes`` as a set of dtype names algoswap knows; a mistake names the unknown ones."""
    if isinstance(dtypes, str):
        raise RegistrationError(f"{where}: dtypes must be a sequence of dtype names, got the string {dtypes!r} "
                                f"(write ({dtypes!r},))")
    names = frozenset(dtypes)
    if names <= _KNOWN and names:
        return names
    unknown = sorted((name for name in names if name not in _KNOWN), key=repr)
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        raise RegistrationError(f"{where}: dtypes {listed} {'is not a dtype' if len(unknown) == 1 else 'are not dtypes'} "
                                f"algoswap knows (expected names from {', '.join(KNOWN_DTYPES)})")
    raise RegistrationError(f"{where}: dtypes is empty (expected at least one of {', '.join(KNOWN_DTYPES)})")


def check_reference(where: str, field: str, ref: Any, *, optional: bool = False, text_is_name: bool = False) -> None:
    """``ref`` is a callable, an ``algoswap.Ref`` or a well-formed "module:attribute" string (None where
    ``optional``; any string where ``text_is_name``: a kernel's literal name)."""
    if ref is None and optional:
        return
    if isinstance(ref, Ref) or (callable(ref) and not isinstance(ref, str)):
        target = ref.target if isinstance(ref, Ref) else None
    elif isinstance(ref, str):
        target = None if text_is_name else ref
    else:
        expected = "a callable, an algoswap.Ref or a 'module:attribute' string" + (" or None" if optional else "")
        raise RegistrationError(f"{where}: {field} must be {expected}; got {type(ref).__name__} {ref!r}")
    if target is not None and not _REFERENCE.match(target):
        raise RegistrationError(f"{where}: {field} {target!r} is not a 'module:attribute' reference "
                                "(expected a dotted module name, a colon and an attribute name, e.g. 'mypkg.conv:conv2d')")
