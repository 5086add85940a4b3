"""The conformance kit (algoswap.testing) as a plugin author meets it: a deliberately broken plugin, registered
in-process, is caught with a message naming what is wrong, the case, the seed and the replay command; the
command line and pytest entry points run on an installed backend."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
import algoswap.testing
from conftest import SEED
from helpers import HANG_SECONDS
from test_registry import make_plugin


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


# What each broken relu returns: its name is the algorithm's.
BROKEN_RELU = {
    "values": lambda x: np.abs(x),
    "nan_lost": lambda x: np.where(np.isnan(x), 0, _relu(x)).astype(x.dtype),
    "dtype": lambda x: _relu(x).astype(np.float64),
    "shape": lambda x: _relu(x)[..., :-1],
}


def _register(registry: Any) -> None:
    registry.add_backend("kitbroken", priority=-50)
    for name, fn in BROKEN_RELU.items():
        registry.add_implementation("relu", name, "kitbroken", fn, dtypes=("float32",))
    registry.add_implementation("relu", "fine", "kitbroken", _relu, dtypes=("float32",))
    # declared unsupported, yet registered: a request for it runs (and gives wrong data)
    registry.declare_unsupported("relu", "claimed", "kitbroken", "no such kernel here")
    registry.add_implementation("relu", "claimed", "kitbroken", lambda x: x * 0, dtypes=("float32",))
    registry.declare_unsupported("relu", "absent", "kitbroken", "never written")
    registry.add_implementation("relu_grad", "wrong", "kitbroken", lambda dy, x: dy, dtypes=("float32",))
    registry.add_backend("kitgone", probe=lambda: "no device here", priority=-50)
    registry.add_implementation("relu", "direct", "kitgone", _relu)


@pytest.fixture(scope="module", autouse=True)
def kitbroken() -> Iterator[None]:
    """The broken plugin in the process-wide registry, where the kit looks; rediscovered afterwards."""
    assert algoswap.register_plugin(make_plugin(_register), name="kitbroken").status == "loaded"
    yield
    algoswap.reload_plugins()


def _failures(algorithm: str, op: str = "relu") -> list[algoswap.testing.Failure]:
    report = algoswap.testing.run(["kitbroken"], ops=[op], seed=SEED)
    return [f for f in report.failures if f.implementation == f"kitbroken:{algorithm}"]


def _caught(algorithm: str, kind: str, op: str = "relu") -> str:
    """The failure of ``kind`` of kitbroken:``algorithm``, checked to name the case, seed and replay command."""
    failures = [f for f in _failures(algorithm, op) if f.kind == kind]
    assert len(failures) == 1, [str(f) for f in _failures(algorithm, op)]
    text = str(failures[0])
    assert f"seed {SEED}; replay: python -m algoswap.testing kitbroken --ops {op} --seed {SEED}" in text, text
    assert f"{op} kitbroken:{algorithm} (float32), {kind}" in text and "case 0 ((3, 4, 5),) {}" in text, text
    return text


def test_wrong_values_are_caught() -> None:
    assert "relative error" in _caught("values", "values")


def test_a_lost_nan_is_caught() -> None:
    text = _caught("nan_lost", "non-finite")
    assert [f.kind for f in _failures("nan_lost")] == ["non-finite"]  # finite inputs: the values check passes
    assert "entries not as the reference has them" in text and ": 0.0, expected nan" in text, text


def test_a_wrong_dtype_is_caught() -> None:
    assert "dtype float64, expected float32" in _caught("dtype", "values")


def test_a_wrong_output_shape_is_caught() -> None:
    assert "shape (3, 4, 4), expected (3, 4, 5)" in _caught("shape", "values")


def test_a_declared_refusal_that_does_not_refuse_is_caught() -> None:
    failures = [f for f in _failures("claimed") if f.kind == "refusal"]
    assert len(failures) == 1, [str(f) for f in _failures("claimed")]
    text = str(failures[0])
    assert "declared unsupported ('no such kernel here') but also registered as an implementation" in text, text
    assert "a request for kitbroken:claimed is served by kitbroken:claimed" in text, text
    assert not _failures("absent")  # declared, not registered: every request is refused


def test_a_wrong_gradient_is_caught_by_finite_differences() -> None:
    text = _caught("wrong", "gradients", op="relu_grad")
    assert "of relu: gradient of input[0]: <G, v> = " in text and "finite difference" in text, text


def test_a_correct_implementation_passes_and_the_report_counts_it() -> None:
    assert not _failures("fine")
    report = algoswap.testing.run(["kitbroken"], ops=["relu"], seed=SEED)
    assert report.passed >= 2 and not report.ok and f"seed {SEED}" in report.summary()


def test_a_failure_replays_with_its_seed_alone_as_in_the_whole_run() -> None:
    whole = algoswap.testing.run(["kitbroken"], seed=SEED)
    alone = algoswap.testing.run(["kitbroken"], ops=["relu_grad"], seed=SEED)
    assert [str(f) for f in whole.failures if f.op == "relu_grad"] == [str(f) for f in alone.failures] != []


def test_assert_conformant_lists_every_failure() -> None:
    with pytest.raises(AssertionError) as caught:
        algoswap.testing.assert_conformant("kitbroken", ops=["relu"], seed=SEED)
    message = str(caught.value)
    for algorithm in ("values", "nan_lost", "dtype", "shape", "claimed"):
        assert f"relu kitbroken:{algorithm} (float32)" in message, message
    algoswap.testing.assert_conformant("numpy", ops=["relu"])


def test_a_backend_that_cannot_run_here_is_not_reported_conformant() -> None:
    with pytest.raises(AssertionError) as caught:
        algoswap.testing.assert_conformant("kitgone")
    message = str(caught.value)
    assert "skipped: kitgone unavailable: no device here" in message and "nothing was checked on kitgone" in message, message


def test_unknown_backends_and_ops_are_refused_by_name() -> None:
    with pytest.raises(algoswap.NoImplementationError, match="nosuch"):
        algoswap.testing.run(["nosuch"])
    with pytest.raises(algoswap.AlgoswapError, match="relux"):
        algoswap.testing.run(["numpy"], ops=["relux"])


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=HANG_SECONDS)


def test_the_command_line_checks_an_installed_backend() -> None:
    done = _run("-m", "algoswap.testing", "numpy", "--ops", "relu", "--seed", str(SEED))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"seed {SEED}" in done.stdout and "passed values-relu-numpy:direct-float32" in done.stdout, done.stdout
    refused = _run("-m", "algoswap.testing", "nosuch")
    assert refused.returncode == 1 and "nosuch" in refused.stderr, refused.stdout + refused.stderr


def test_pytest_runs_the_kit_from_the_installed_package(tmp_path: Any) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "algoswap.testing",
                           "--algoswap-backend", "numpy", "--algoswap-seed", str(SEED), "-k", "relu"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout


def test_the_kit_needs_neither_torch_nor_pytest() -> None:
    code = ("import sys, algoswap.testing; algoswap.testing.assert_conformant('numpy', ops=['relu', 'conv2d']); "
            "print(sorted({'torch', 'pytest'} & set(sys.modules)))")
    done = _run("-c", code)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
