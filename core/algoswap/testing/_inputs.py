"""Case inputs beyond standard normal float arrays, and drawing and binding cases (shared by
the case table, the conformance checks and the gradient checks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import algoswap


@dataclass(frozen=True)
class Arg:
    """A case input that is not a standard normal array of the tested float dtype: kind 'wide'
    (standard normal times 4: past the kinks and saturations of activations at +-3 and +-6),
    'positive' (uniform in [0.5, 2]), 'unit' (uniform in [0.05, 0.95]), 'pairs' (standard normal, the
    two halves of each row along the last axis equal: every value twice, so a maximum over the last axis
    is a tie of two, and no value thrice), 'int' (int64 in [0, high)), 'bool', or 'csr' (a scipy.sparse
    CSR matrix of the tested dtype, density 0.4)."""

    shape: tuple[int, ...]
    kind: str
    high: int = 0


def shape_of(entry: Any) -> tuple[int, ...] | None:
    return entry.shape if isinstance(entry, Arg) else entry


def dtype_of(entry: Any, dtype: str) -> str | None:
    if entry is None:
        return None
    kind = entry.kind if isinstance(entry, Arg) else "normal"
    return {"int": "int64", "bool": "bool"}.get(kind, dtype)


def bind(op: str, entries: tuple[Any, ...], dtype: str, attrs: dict[str, Any]) -> algoswap.OpCall:
    """The validated call of a case, its inputs drawn in ``dtype`` (integer and bool inputs aside)."""
    return algoswap.registry().spec(op).bind([shape_of(e) for e in entries], [dtype_of(e, dtype) for e in entries], attrs)


def draw(rng: np.random.Generator, entry: Any, dtype: str) -> Any:
    """A fresh random input for a case entry (None stays None)."""
    if entry is None:
        return None
    if not isinstance(entry, Arg):
        return np.asarray(rng.standard_normal(entry)).astype(dtype)
    if entry.kind == "wide":
        return (4 * rng.standard_normal(entry.shape)).astype(dtype)
    if entry.kind == "positive":
        return rng.uniform(0.5, 2.0, entry.shape).astype(dtype)
    if entry.kind == "unit":
        return rng.uniform(0.05, 0.95, entry.shape).astype(dtype)
    if entry.kind == "pairs":
        half = np.asarray(rng.standard_normal(entry.shape[:-1] + (entry.shape[-1] // 2,))).astype(dtype)
        return np.concatenate([half, half], axis=-1)
    if entry.kind == "int":
        return rng.integers(0, entry.high, entry.shape)
    if entry.kind == "bool":
        return rng.random(entry.shape) < 0.5
    import scipy.sparse  # type: ignore[import-untyped]

    return scipy.sparse.random(*entry.shape, density=0.4, format="csr", dtype=dtype, rng=rng, data_rvs=rng.standard_normal)


def set_up_for(impl: algoswap.ImplRecord) -> None:
    """What checking ``impl`` needs beyond its inputs: a communication op of a backend other than the reference
    runs in a world of this process alone, which ``algoswap.dist.init()`` sets up (with torch.distributed);
    the cases' groups have one rank."""
    if impl.op in algoswap.FAMILIES["comm"] and impl.backend != reference_backend():
        from algoswap import dist

        dist.init()


def reference_backend() -> str | None:
    reference = algoswap.registry().reference
    return None if reference is None else reference.name

