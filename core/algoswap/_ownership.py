"""Who may have a name: reserved names, names already owned, and names several plugins declare.

Ownership never depends on the order plugins load in: discovery stages every plugin's registration
first and settles the claims of all of them together. A name two or more of them declare goes to
none of them (each is refused, and each refusal names the others); a name the core or an already
loaded plugin owns is refused to newcomers; a reserved name goes only to its distribution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from ._settings import normalise

if TYPE_CHECKING:
    from ._registry import Registrar, Registry

# The reference backend defines what each op means: no other distribution may displace it.
RESERVED_BACKENDS: Mapping[str, str] = {"numpy": "algoswap-numpy"}


def refused_claims(registry: "Registry", staged: Sequence["Registrar"]) -> list[str]:
    """For each staged registration, why it may not be committed ("" if it may), from the claims
    of all of them together (so the outcome does not depend on their order)."""
    claimants: dict[tuple[str, str], list["Registrar"]] = {}
    for registrar in staged:
        for claim in registrar.claims():
            claimants.setdefault(claim, []).append(registrar)
    reasons = []
    for registrar in staged:
        problems = (_problem(registry, kind, name, registrar, claimants[(kind, name)]) for kind, name in registrar.claims())
        reasons.append("; ".join(p for p in problems if p))
    return reasons


def _problem(registry: "Registry", kind: str, name: str, registrar: "Registrar", rivals: list["Registrar"]) -> str:
    mine = registrar.plugin.owner
    reserved_for = RESERVED_BACKENDS.get(name) if kind == "backend" else None
    if reserved_for is not None:
        if normalise(registrar.plugin.distribution) != reserved_for:
            return f"backend {name!r} is reserved for {reserved_for} (the reference backend); {mine} may not declare it"
        rivals = []  # impostors are refused above: they contest nothing
    owner = registry.owner_of_name(kind, name)
    if owner is not None:
        return f"{kind} {name!r} is declared by both {owner} and {mine}"
    others = [r.plugin.owner for r in rivals if r is not registrar]
    if others:
        return (f"{kind} {name!r} is also declared by {' and '.join(others)}: a name several plugins declare goes to "
                f"none of them (disable or uninstall all but one)")
    return ""
