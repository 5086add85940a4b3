"""Conformance: every registered implementation against the NumPy reference, on fresh random inputs.

Parametrized over the registry as installed, so a newly installed backend is tested without
touching this file. Implementations of unavailable backends are skipped with the backend's reason.
"""

from __future__ import annotations

import numpy as np
import pytest

import algoswap
from helpers import UNIT_ROUNDOFF, fail, mismatch
from op_cases import bind, cases_for, draw, implementation_params, reference_name
from op_scales import op_scale, update_scale


@pytest.mark.parametrize("impl, dtype", implementation_params(tuple(UNIT_ROUNDOFF), integer_fallback=True))
def test_matches_reference(impl: algoswap.ImplRecord, dtype: str, rng: np.random.Generator) -> None:
    cases = cases_for(impl.op)
    if not cases:
        pytest.fail(f"no conformance cases for op {impl.op!r}: add them to tests/op_cases.py")
    ran, failures = check_conformance(impl, dtype, rng)
    assert ran, f"{impl.qualified} supports none of the {len(cases)} cases of {impl.op}"
    if failures:
        fail(f"{impl.qualified} ({dtype}):\n" + "\n".join(failures))


def check_conformance(impl: algoswap.ImplRecord, dtype: str, rng: np.random.Generator) -> tuple[int, list[str]]:
    """Run ``impl`` on every case it supports; return how many ran and what went wrong.

    Inputs the op updates in place (``OpSpec.in_place``) are compared with the reference's updates. Results are
    compared by ``helpers.mismatch`` with the scale and reduction length tests/op_scales.py gives each op."""
    cases = cases_for(impl.op)
    spec = algoswap.registry().spec(impl.op)
    updated = [spec.input_names.index(name) for name in spec.in_place]
    ran, failures = 0, []
    for index, (shapes, attrs) in enumerate(cases):
        call = bind(impl.op, shapes, dtype, attrs)
        if impl.check(call) is not True:
            continue
        inputs = [draw(rng, s, dtype) for s in shapes]
        originals = [None if a is None else a.copy() for a in inputs]
        wide = [_widen(a) for a in inputs]
        out = _run(impl, call, inputs, updated)
        scale = None if updated else op_scale(impl.op, wide, attrs)  # before the reference updates `wide` in place
        ref = algoswap.ops.call(impl.op, *wide, algorithm=reference_name(impl.op), **attrs)
        if updated:
            scale = update_scale(originals[updated[0]], ref, _rows(inputs))
        problem = _compare(out, ref, call, dtype, scale)
        for position in updated:
            problem = problem or _compare_update(inputs[position], wide[position], originals[position], _rows(inputs),
                                                 call.input_names[position])
        if any(p not in updated and a is not None and not _equal(a, o) for p, (a, o) in enumerate(zip(inputs, originals))):
            problem = problem or "modified its inputs"
        if problem:
            failures.append(f"case {index} {shapes} {attrs}: {problem}")
        ran += 1
    return ran, failures


def _widen(array: object) -> object:
    """A float64 copy of a floating input (CSR included); integer and bool inputs as they are."""
    dtype = getattr(array, "dtype", None)
    if dtype is None or (dtype.kind != "f" and dtype.name != "bfloat16"):
        return array
    return array.astype(np.float64)  # type: ignore[attr-defined]


def _equal(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return np.array_equal(a.toarray(), b.toarray())  # type: ignore[attr-defined]


def _rows(inputs: list[object]) -> int:
    """How many rows a sparse update may sum into one (its indices), 1 for a dense one."""
    return max((a.size for a in inputs if isinstance(a, np.ndarray) and a.dtype.kind == "i"), default=1)


def _compare_update(got: np.ndarray, ref: np.ndarray, before: np.ndarray, rows: int, name: str) -> str:
    scale, length = update_scale(before, ref, rows)
    problem = mismatch(got, ref, reduction_length=length, scale=scale)
    return f"'{name}' updated with {problem}" if problem else ""


def _run(impl: algoswap.ImplRecord, call: algoswap.OpCall, inputs: list[np.ndarray | None], updated: list[int]) -> object:
    """The implementation's output, in host memory; inputs it updates in place (in its own memory
    space) are read back into ``inputs``."""
    memory = algoswap.registry().backends[impl.backend].memory
    uploaded = [None if a is None else memory.upload(a) for a in inputs]
    out = impl.callable(*uploaded, **call.attrs)
    for position in updated:
        inputs[position][...] = memory.download(uploaded[position])  # type: ignore[index]
    return memory.download(out)


def _compare(out: object, ref: np.ndarray, call: algoswap.OpCall, dtype: str, scale: tuple[object, int]) -> str:
    if not isinstance(out, np.ndarray):
        return f"returned {type(out).__name__}, expected a numpy array"
    if out.shape != call.out_shape:
        return f"shape {out.shape}, expected {call.out_shape}"
    expected = dtype if call.dtype == dtype and dtype in UNIT_ROUNDOFF else str(ref.dtype)
    if str(out.dtype) != expected:
        return f"dtype {out.dtype}, expected {expected}"
    magnitudes, length = scale
    return mismatch(out, ref, reduction_length=length, scale=magnitudes)


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
