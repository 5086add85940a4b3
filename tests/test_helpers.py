"""The tolerance policy of algoswap/testing/_tolerance.py and _scales.py: the draws that once failed by chance pass,
a wrong result fails with a message that replays it, and every op has a rule."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import algoswap
import helpers
from helpers import assert_close, mismatch, relative_error, replay_command, tolerance, unit_roundoff
from algoswap.testing._cases import draw, reference_name
from algoswap.testing._scales import is_classified, op_scale

torch = pytest.importorskip("torch")


def _draw_of(seed: int, nodeid: str) -> np.random.Generator:
    """The generator the rng fixture gave ``nodeid`` in a session with ``seed``."""
    return np.random.default_rng([seed, zlib.crc32(nodeid.encode())])


def test_a_mean_near_zero_is_compared_against_its_terms() -> None:
    """ALGOSWAP_TEST_SEED=10 made reduce_mean's float32 result over 24 normal draws 0.006: its rounding
    error is a large part of so small a result, though a tiny part of the terms' scale."""
    rng = _draw_of(10, "tests/test_numpy_reference_ops.py::test_forward_and_gradients_match_torch[reduce_mean-0-float32]")
    x = draw(rng, (2, 3, 4), "float32")
    out = algoswap.ops.call("reduce_mean", x, algorithm=reference_name("reduce_mean"))
    exact = torch.from_numpy(x.astype(np.float64)).mean().numpy()
    assert relative_error(out, exact) > 2e-6  # the old check, against the result's own norm, failed
    scale, length = op_scale("reduce_mean", [x], {})
    assert length == 24 and mismatch(out, exact, reduction_length=length, scale=scale) == ""


def test_a_softmax_gradient_with_a_dominant_class_is_compared_against_its_terms() -> None:
    """ALGOSWAP_TEST_SEED=1033633678: one of nine logits takes 99% of the mass, so y * (dy - sum(dy * y))
    is about 0.004 of its terms' scale, and float32 rounding (of y, then of the difference) is 1.5e-5 of it."""
    from algoswap_numpy import softmax

    rng = _draw_of(1033633678, "tests/test_numpy_reference_more.py::test_softmax_forward_and_grad[False-x_shape4-0-float32]")
    x = (rng.standard_normal(9) * 2 + 1000).astype(np.float32)
    dy = np.asarray(rng.standard_normal(9)).astype(np.float32)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    torch.softmax(xt, 0).backward(torch.from_numpy(dy.astype(np.float64)))
    y = softmax.softmax(x, axis=0)
    got = softmax.softmax_grad(dy, y, axis=0)
    assert relative_error(got, xt.grad) > 1e-5  # the old check failed
    scale, length = op_scale("softmax_grad", [dy, y], {"axis": 0})
    assert mismatch(got, xt.grad, reduction_length=length, scale=scale) == ""


def test_a_wrong_result_fails_with_the_error_the_bound_the_case_and_the_replay_command(request: pytest.FixtureRequest) -> None:
    ref = np.linspace(-1, 1, 50)
    wrong = (ref * (1 + 1e-5)).astype(np.float32)  # 168 float32 ulps off: no rounding does that in 11 terms
    with pytest.raises(AssertionError) as failure:
        assert_close(wrong, ref, reduction_length=11, context="conv2d case 3")
    message = str(failure.value)
    assert message.startswith("conv2d case 3: relative error 1e-05 > bound")
    assert f"ALGOSWAP_TEST_SEED={helpers._current['seed']} " in message and request.node.nodeid in message
    assert replay_command() in message and replay_command().endswith(f"-m pytest {request.node.nodeid}")
    assert_close(ref.astype(np.float32), ref, reduction_length=11)  # one rounding: well inside


def test_the_bound_grows_with_the_reduction_and_the_precision() -> None:
    assert unit_roundoff("float32") == 2.0**-24 and unit_roundoff(np.float64) == 2.0**-53 and unit_roundoff("bfloat16") == 2.0**-8
    assert tolerance("float32", 100) == helpers.SAFETY * 101 * 2.0**-24
    assert tolerance("bfloat16", 100) == helpers.SAFETY * (2.0**-8 + 100 * 2.0**-24)  # accumulated in float32
    assert tolerance("int64") == 0.0


def test_non_finite_values_must_match_exactly() -> None:
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert mismatch(ref.copy(), ref) == ""
    assert "NaN expected at [[0]]" in mismatch(np.array([0.0, np.inf, -np.inf, 1.0]), ref)
    assert "NaN at [[3]] not expected" in mismatch(np.array([np.nan, np.inf, -np.inf, np.nan]), ref)
    assert "infinities differ" in mismatch(np.array([np.nan, -np.inf, -np.inf, 1.0]), ref)


def test_every_op_has_a_tolerance_rule() -> None:
    missing = [op for op in algoswap.registry().ops if not is_classified(op)]
    assert not missing, f"ops without a scale and reduction length in algoswap/testing/_scales.py: {missing}"


def test_the_scale_of_a_sum_is_the_sum_of_magnitudes_and_its_length_counts_terms(rng: np.random.Generator) -> None:
    x, w = rng.standard_normal((1, 3, 5, 5)), rng.standard_normal((2, 3, 3, 3))
    scale, length = op_scale("conv2d", [x, w, None], {"padding": 1})
    assert length == 27  # 3 channels by 3 by 3; border pixels have fewer (the padding adds zeros)
    expected = algoswap.ops.call("conv2d", np.abs(x), np.abs(w), None, algorithm="numpy:direct", padding=1)
    assert np.array_equal(scale, expected)
