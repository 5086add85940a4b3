"""Declared refusals (``registrar.declare_unsupported``) checked to really refuse: a request for the refused
(op, algorithm, backend) on a case of the op must be answered with an algoswap error, never served by an
implementation registered under the same name."""

from __future__ import annotations

import algoswap
from algoswap._records import UnsupportedRecord
from algoswap._select import choose

from ._cases import cases_for
from ._inputs import bind


def check_refusal(refusal: UnsupportedRecord, dtype: str = "float32") -> tuple[int, list[str]]:
    """Request ``refusal`` on each case of its op; return how many cases were asked and which were served."""
    qualified = f"{refusal.backend}:{refusal.algorithm}"
    registered = (refusal.op, refusal.algorithm, refusal.backend) in algoswap.registry().impls
    failures = [f"declared unsupported ({refusal.reason!r}) but also registered as an implementation"] if registered else []
    asked = 0
    for index, (shapes, attrs) in enumerate(cases_for(refusal.op)):
        asked += 1
        try:
            selection = choose(algoswap.registry(), bind(refusal.op, shapes, dtype, attrs), qualified, memory=None)
        except algoswap.AlgoswapError:
            continue
        failures.append(f"case {index} {shapes} {attrs}: a request for {qualified} is served by "
                        f"{selection.impl.qualified}, though {qualified} is declared unsupported ({refusal.reason!r})")
    return asked, failures
