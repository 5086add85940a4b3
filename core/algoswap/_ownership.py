"""Who may have a name or a role: names already owned, names several plugins declare, and the
reference backend's name and role.

Ownership never depends on the order plugins load in: discovery stages every plugin's registration
first and settles the claims of all of them together. A name two or more of them declare goes to
none of them (each is refused, and each refusal names the others); a name the core or an already
loaded plugin owns is refused to newcomers. The reference role (``add_backend(...,
reference=True)``) is a claim like a name: at most one backend holds it, and the backend name of
its claimant is refused to every other plugin staged with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ._registry import Registrar, Registry


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
    if kind == "role":
        return _reference_problem(registry, registrar, rivals)
    if kind == "backend":
        reference = next((r for r in rivals if r.reference == name), None)
        if reference is not None and reference is not registrar:
            return f"backend {name!r} is the reference backend, declared by {reference.plugin.owner}; {mine} may not declare it"
        if reference is registrar:
            rivals = []  # the others are refused above: they contest nothing
    owner = registry.owner_of_name(kind, name)
    if owner is not None:
        return f"{kind} {name!r} is declared by both {owner} and {mine}"
    others = [r.plugin.owner for r in rivals if r is not registrar]
    if others:
        return (f"{kind} {name!r} is also declared by {' and '.join(others)}: a name several plugins declare goes to "
                f"none of them (disable or uninstall all but one)")
    return ""


def _reference_problem(registry: "Registry", registrar: "Registrar", rivals: list["Registrar"]) -> str:
    """Why ``registrar``'s backend may not be the reference: another one is, or also claims to be."""
    mine = f"backend {registrar.reference!r} ({registrar.plugin.owner})"
    held = registry.reference
    if held is not None:
        return f"{mine} declares itself the reference backend, but {held.name!r} ({held.owner}) is: at most one backend is"
    others = [f"{r.reference!r} ({r.plugin.owner})" for r in rivals if r is not registrar]
    if others:
        return (f"{mine} and {' and '.join(others)} each declare themselves the reference backend: at most one backend "
                f"is, so none of them is taken (disable or uninstall all but one)")
    return ""
