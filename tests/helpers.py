"""Test helpers: ``assert_close`` asserts the tolerance policy of algoswap.testing._tolerance (its module
docstring is the policy), and a failure names the session seed and the command that replays the test
(conftest.py tells this module which test is running). tests/ is on sys.path: ``from helpers import assert_close``."""

from __future__ import annotations

import shlex
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from algoswap.testing._scales import op_scale
from algoswap.testing._tolerance import (  # noqa: F401 (the tests import them from here)
    SAFETY, UNIT_ROUNDOFF, as_float64, central_difference, comparison_bound, dtype_name, mismatch, network_terms, relative_error,
    tolerance, unit_roundoff,
)

# A subprocess time limit only a hang reaches: on two shared cores the README's examples took 80 s.
HANG_SECONDS = 900

_current = {"nodeid": "", "seed": None, "rootdir": Path.cwd()}


def set_current_test(nodeid: str, seed: int | None, rootdir: Path) -> None:
    """Called by conftest.py before each test: what ``replay_command`` names."""
    _current.update(nodeid=nodeid, seed=seed, rootdir=rootdir)


def replay_command(nodeid: str | None = None) -> str:
    """The exact command that replays the running test (or ``nodeid``) with this session's seed."""
    nodeid = nodeid or str(_current["nodeid"])
    python = Path(sys.executable)
    try:
        shown = str(python.relative_to(Path(str(_current["rootdir"]))))
    except ValueError:
        shown = str(python)
    return f"ALGOSWAP_TEST_SEED={_current['seed']} {shown} -m pytest {shlex.quote(nodeid)}"


def hardware_refusal(backend: str, dtype: str) -> str:
    """Why this machine lacks the hardware ``backend`` needs for ``dtype``, in the backend's words ("" where it has
    it): a test skips with it. The one case: dnnl in bfloat16 on a CPU oneDNN 3.2 has no bfloat16 kernels for (no
    AVX512-BF16 or AMX), as ``algoswap_dnnl.runs_bfloat16`` finds. Where the CPU has them, every such test runs."""
    if backend == "dnnl" and dtype == "bfloat16":
        import algoswap_dnnl

        runs = algoswap_dnnl.runs_bfloat16()
        return runs if isinstance(runs, str) else ""
    return ""


def backend_unavailable(name: str) -> str:
    """Why backend ``name`` cannot run here ("" where it can): GPU-only test modules skip with it."""
    import algoswap

    backends = algoswap.registry().backends
    available = backends[name].availability() if name in backends else "not loaded"
    return "" if available is True else f"{name} backend unavailable: {available}"


def derived_seed(*keys: int) -> int:
    """A seed drawn from the session seed, the running test and ``keys``: fresh each run, replayable."""
    words = [int(_current["seed"] or 0), zlib.crc32(str(_current["nodeid"]).encode()), *keys]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> 1)


def replay_note() -> str:
    return f"seed {_current['seed']}; replay: {replay_command()}"


def assert_close(out: Any, ref: Any, *, dtype: Any = None, reduction_length: int = 1, scale: Any = None,
                 ref_dtype: Any = None, accumulate: Any = None, layers: int = 1, context: Any = "") -> None:
    """Assert ``out`` matches ``ref`` under the policy in this module's docstring; on failure the message
    gives the error, the bound, ``context`` (the case), the seed and the command that replays the test.

    ``dtype``/``ref_dtype``: the precisions ``out``/``ref`` were computed in (default: their dtypes);
    ``reduction_length``: n; ``scale``: the terms' magnitudes (default ``ref``; a number is a norm);
    ``accumulate``: the accumulation precision (default: float32 for half precisions); ``layers``: L."""
    problem = mismatch(out, ref, dtype=dtype, reduction_length=reduction_length, scale=scale, ref_dtype=ref_dtype,
                       accumulate=accumulate, layers=layers)
    if problem:
        fail(f"{context}: {problem}" if context != "" else problem)


def fail(message: str) -> None:
    """Raise an AssertionError carrying ``message``, the seed and the replay command."""
    raise AssertionError(f"{message}\n{replay_note()}")


def assert_op_close(op: str | None, out: Any, ref: Any, inputs: list[Any], attrs: dict[str, Any], *,
                    dtype: Any = None, context: Any = "") -> None:
    """``assert_close`` with the scale and reduction length of ``op`` on ``inputs`` (op None: data
    movement, the result itself and one term); ``dtype``, when given, is the dtype ``out`` must have."""
    if dtype is not None:
        assert dtype_name(out) == dtype_name(dtype), f"{op}: dtype {dtype_name(out)}, expected {dtype_name(dtype)}"
    scale, length = (None, 1) if op is None else op_scale(op, list(inputs), attrs)
    shapes = [getattr(a, "shape", None) for a in inputs]
    assert_close(out, ref, reduction_length=length, scale=scale, context=context or f"{op} on {shapes} {attrs}")


def check(out: Any, ref: Any, dtype: Any, op: str | None = None, inputs: tuple[Any, ...] = (), **attrs: Any) -> None:
    """``assert_op_close`` for a kernel called directly: ``out`` must have ``dtype``; ``op`` and ``attrs``
    name the op it computes (None: data movement)."""
    assert_op_close(op, out, ref, list(inputs), attrs, dtype=dtype)
