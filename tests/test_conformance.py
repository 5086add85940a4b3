"""Conformance: every registered implementation against the NumPy reference, on fresh random inputs, by the
conformance kit (algoswap.testing: its cases, bounds and checks; tests/test_kit.py tests the kit's entry points).

Parametrized over the registry as installed, so a newly installed backend is tested without
touching this file. Implementations of unavailable backends are skipped with the backend's reason, and so are
those that refuse every case in a dtype this CPU has no kernels for (helpers.hardware_refusal).
"""

from __future__ import annotations

import numpy as np
import pytest

import algoswap
from algoswap.testing._cases import bind, cases_for, implementation_params, reference_name
from algoswap.testing._conformance import check_conformance
from helpers import UNIT_ROUNDOFF, fail, hardware_refusal


@pytest.mark.parametrize("impl, dtype", implementation_params(tuple(UNIT_ROUNDOFF), integer_fallback=True))
def test_matches_reference(impl: algoswap.ImplRecord, dtype: str, rng: np.random.Generator) -> None:
    cases = cases_for(impl.op)
    if not cases:
        pytest.fail(f"no conformance cases for op {impl.op!r}: add them to core/algoswap/testing/_cases.py")
    ran, failures = check_conformance(impl, dtype, rng)
    if not ran and (refusal := hardware_refusal(impl.backend, dtype)):
        pytest.skip(refusal)  # every case refused where the CPU has no kernels for dtype; elsewhere: fails below
    assert ran, f"{impl.qualified} supports none of the {len(cases)} cases of {impl.op}"
    if failures:
        fail(f"{impl.qualified} ({dtype}):\n" + "\n".join(failures))


def test_every_op_has_cases() -> None:
    missing = [op for op in algoswap.registry().ops if not cases_for(op)]
    assert not missing, f"ops without conformance cases: {missing}"


def test_reference_serves_every_case() -> None:
    registry = algoswap.registry()
    for op in registry.ops:
        backend, _, algorithm = reference_name(op).partition(":")
        ref = registry.impls[(op, algorithm, backend)]
        for shapes, attrs in cases_for(op):
            call = bind(op, shapes, "float64", attrs)
            assert ref.check(call) is True, (op, shapes, attrs)


def test_conformance_catches_a_wrong_implementation(rng: np.random.Generator) -> None:
    wrong = algoswap.ImplRecord("relu", "wrong", "numpy", lambda x: np.abs(x))
    ran, failures = check_conformance(wrong, "float32", rng)
    assert ran == 3 and len(failures) == 3 and "relative error" in failures[0]


def test_conformance_catches_a_wrong_dtype_and_shape(rng: np.random.Generator) -> None:
    wrong_dtype = algoswap.ImplRecord("relu", "wrong", "numpy", lambda x: np.maximum(x, 0).astype(np.float64))
    wrong_shape = algoswap.ImplRecord("flatten", "wrong", "numpy", lambda x, start_dim, end_dim: x)
    assert "dtype float64" in check_conformance(wrong_dtype, "float32", rng)[1][0]
    assert "shape" in check_conformance(wrong_shape, "float32", rng)[1][0]


def test_conformance_catches_input_mutation(rng: np.random.Generator) -> None:
    def relu_in_place(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0, out=x)

    ran, failures = check_conformance(algoswap.ImplRecord("relu", "wrong", "numpy", relu_in_place), "float64", rng)
    assert failures and all("modified its inputs" in f for f in failures)
