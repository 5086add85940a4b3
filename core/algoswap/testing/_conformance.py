"""Conformance: an implementation against the NumPy reference on fresh random inputs, case by case
(the cases of algoswap/testing/_cases.py), within the error bounds of algoswap/testing/_scales.py."""

from __future__ import annotations

from typing import Any

import numpy as np

import algoswap

from ._cases import cases_for, reference_name
from ._inputs import bind, draw, set_up_for
from ._scales import op_scale, update_scale
from ._tolerance import UNIT_ROUNDOFF, mismatch


def check_conformance(impl: algoswap.ImplRecord, dtype: str, rng: np.random.Generator) -> tuple[int, list[str]]:
    """Run ``impl`` on every case it supports; return how many ran and what went wrong.

    Inputs the op updates in place (``OpSpec.in_place``) are compared with the reference's updates. Results are
    compared by ``mismatch`` (algoswap/testing/_tolerance.py) with the scale and reduction length
    algoswap/testing/_scales.py gives each op."""
    set_up_for(impl)
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


def _widen(array: Any) -> Any:
    """A float64 copy of a floating input (CSR included); integer and bool inputs as they are."""
    dtype = getattr(array, "dtype", None)
    if dtype is None or (dtype.kind != "f" and dtype.name != "bfloat16"):
        return array
    return array.astype(np.float64)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return np.array_equal(a.toarray(), b.toarray())


def _rows(inputs: list[object]) -> int:
    """How many rows a sparse update may sum into one (its indices), 1 for a dense one."""
    return max((a.size for a in inputs if isinstance(a, np.ndarray) and a.dtype.kind == "i"), default=1)


def _compare_update(got: np.ndarray, ref: Any, before: Any, rows: int, name: str) -> str:
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


def _compare(out: object, ref: np.ndarray, call: algoswap.OpCall, dtype: str, scale: Any) -> str:
    if not isinstance(out, np.ndarray):
        return f"returned {type(out).__name__}, expected a numpy array"
    if out.shape != call.out_shape:
        return f"shape {out.shape}, expected {call.out_shape}"
    expected = dtype if call.dtype == dtype and dtype in UNIT_ROUNDOFF else str(ref.dtype)
    if str(out.dtype) != expected:
        return f"dtype {out.dtype}, expected {expected}"
    magnitudes, length = scale
    return mismatch(out, ref, reduction_length=length, scale=magnitudes)
