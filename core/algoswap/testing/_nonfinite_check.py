"""Non-finite conformance: an implementation on the conformance cases of its op with NaN, +inf and -inf
planted into its inputs (algoswap/testing/_nonfinite.py), against an oracle.

The kit's oracle is the NumPy reference in float64 (``reference_oracle``), which needs no torch; the repo's
own suite passes torch's semantics instead (tests/torch_oracle.py), and holds the reference to them, so the
two agree. The oracle runs once per case, dtype and seed, on trials drawn from the seed, for all the op's
implementations. An implementation registered with ``nan="exact"`` must give NaN, +inf and -inf exactly
where the oracle does; one registered with ``nan="spreads"`` (FFT and Winograd convolutions) may also
give NaN where the oracle is finite, and nothing else. Entries finite in both agree within ``TOLERANCE``.
Where the oracle refuses the input (raises), the implementation must raise an algoswap error.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import algoswap

from ._cases import cases_for, reference_name
from ._inputs import bind, draw, set_up_for
from ._nonfinite import Trial, compare, plantable, trials

TOLERANCE = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 2e-5, "float64": 1e-11}

@dataclass(frozen=True)
class Oracle:
    """What an op computes on non-finite inputs: ``run(call, inputs, updated)`` gives the results in float64
    (the output, then the inputs updated in place) or the exception it refused the inputs with."""

    name: str
    run: Callable[[algoswap.OpCall, list[Any], list[int]], Any]


def _reference_answer(call: algoswap.OpCall, inputs: list[Any], updated: list[int]) -> list[np.ndarray] | Exception:
    wide = [a.astype(np.float64) if a is not None and floating(a) else a for a in inputs]
    try:
        with np.errstate(all="ignore"):
            out = algoswap.ops.call(call.op, *wide, algorithm=reference_name(call.op), **call.attrs)
    except algoswap.AlgoswapError as error:
        return error
    return [out] + [wide[p] for p in updated]


reference_oracle = Oracle("the reference", _reference_answer)


def floating(array: Any) -> bool:
    return bool(array.dtype.kind == "f" or array.dtype.name == "bfloat16")


@dataclass
class Prepared:
    """One case's trials and the oracle's answer to each, shared by every implementation of the op."""

    call: algoswap.OpCall
    updated: list[int]
    scale: float
    trials: list[tuple[Trial, Any]]
    oracle: str = "the reference"


_PREPARED: dict[tuple[str, int, str, int, str], Prepared | None] = {}


def _prepared(op: str, index: int, dtype: str, seed: int, oracle: Oracle) -> Prepared | None:
    """The trials of case ``index`` of ``op`` in ``dtype`` (None if no input is floating), drawn from
    ``seed`` (so that the oracle runs once for all implementations)."""
    key = (op, index, dtype, seed, oracle.name)
    if key not in _PREPARED:
        rng = np.random.default_rng([seed, zlib.crc32(repr((op, index, dtype)).encode())])
        _PREPARED[key] = _prepare(op, index, dtype, rng, oracle)
    return _PREPARED[key]


def _prepare(op: str, index: int, dtype: str, rng: np.random.Generator, oracle: Oracle) -> Prepared | None:
    shapes, attrs = cases_for(op)[index]
    spec = algoswap.registry().spec(op)
    call = bind(op, shapes, dtype, attrs)
    updated = [spec.input_names.index(name) for name in spec.in_place]
    clean = [draw(rng, s, dtype) for s in shapes]
    if not any(plantable(a) for a in clean):
        return None
    expected = oracle.run(call, clean, updated)
    if isinstance(expected, Exception):
        raise AssertionError(f"{oracle.name}, the oracle of {op}, refuses its case {index} of finite inputs: {expected}")
    scale = float(np.sqrt(np.mean(np.square(expected[0])))) if expected[0].size else 0.0
    answers = [(trial, oracle.run(call, trial.inputs, updated)) for trial in trials(call, clean, rng)]
    return Prepared(call, updated, scale, answers, oracle.name)


def check_nonfinite(impl: algoswap.ImplRecord, dtype: str, seed: int, oracle: Oracle = reference_oracle) -> tuple[int, list[str]]:
    """Run ``impl`` on every trial of every case it supports; return how many cases ran and what went wrong."""
    set_up_for(impl)
    ran, failures = 0, []
    for index, (shapes, attrs) in enumerate(cases_for(impl.op)):
        if impl.check(bind(impl.op, shapes, dtype, attrs)) is not True:
            continue
        case = _prepared(impl.op, index, dtype, seed, oracle)
        if case is None:
            continue
        for trial, expected in case.trials:
            problem = judge(impl, case, trial.inputs, expected, TOLERANCE[dtype])
            if problem:
                failures.append(f"case {index} {shapes} {attrs}, {trial.what}: {problem}")
        ran += 1
    return ran, failures


def judge(impl: algoswap.ImplRecord, case: Prepared, inputs: list[Any], expected: Any, tolerance: float) -> str:
    """What ``impl`` got wrong on ``inputs`` against the oracle's ``expected`` ("" if nothing)."""
    try:
        with np.errstate(all="ignore"):  # NumPy warns of the invalid operations NaN and inf make
            got = _run(impl, case.call, [None if a is None else a.copy() for a in inputs], case.updated)
    except algoswap.AlgoswapError as error:
        if isinstance(expected, Exception):
            return ""
        return f"raised {type(error).__name__}: {error}"
    except Exception as error:
        return f"raised {type(error).__name__} (not an algoswap error): {error}"
    if isinstance(expected, Exception):
        return f"returned a result where the oracle refuses the input ({case.oracle}: {type(expected).__name__}: {expected})"
    names = ["output"] + [f"'{case.call.input_names[p]}' (updated in place)" for p in case.updated]
    for name, out, ref in zip(names, got, expected):
        problem = compare(out, ref, impl.nan, tolerance, case.scale, case.oracle)
        if problem:
            return f"{name}: {problem}"
    return ""


def _run(impl: algoswap.ImplRecord, call: algoswap.OpCall, inputs: list[Any], updated: list[int]) -> list[np.ndarray]:
    """The output (and the inputs updated in place) of ``impl``, in host memory."""
    memory = algoswap.registry().backends[impl.backend].memory
    uploaded = [None if a is None else memory.upload(a) for a in inputs]
    out = impl.callable(*uploaded, **call.attrs)
    return [np.asarray(memory.download(out))] + [np.asarray(memory.download(uploaded[p])) for p in updated]
