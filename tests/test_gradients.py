"""Every op's gradient rules, checked against its forward op by finite differences in float64, by the
conformance kit (algoswap/testing/_gradients.py: the method and its error bound are described there)."""

from __future__ import annotations

import numpy as np
import pytest

import algoswap
from algoswap.testing._cases import cases_for
from algoswap.testing._gradients import check_gradients, gradient_checks
from helpers import fail


def _ops_with_gradients() -> list[str]:
    return [name for name, spec in algoswap.registry().ops.items() if spec.gradients]


@pytest.mark.parametrize("op", _ops_with_gradients())
def test_gradient_rules_match_finite_differences(op: str, rng: np.random.Generator) -> None:
    checked, failures = check_gradients(op, rng)
    if failures:
        fail(f"{op}: " + "\n".join(failures))
    assert checked >= len(cases_for(op)), f"{op}: only {checked} gradients checked"


class _Pattern:
    """Stands in for the generator: 1, 2, 3, 1, 2, ... in every draw (grad_output and direction), so that
    a test's outcome depends on no draw."""

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.arange(int(np.prod(shape))).reshape(shape) % 3 + 1.0


def test_a_kink_inside_the_stencil_stays_within_the_bound(rng: np.random.Generator) -> None:
    """relu at an input of exactly 0 and a max pooling window with a tie moved apart by the direction: the
    central difference sees the mean of two slopes there (off any one-sided gradient by 0.5 and 1 here),
    and the bound's kink term covers it."""
    x = rng.standard_normal((2, 3, 4))
    x[0, 1, 2] = 0.0
    windows = rng.standard_normal((1, 1, 4, 4))
    windows[0, 0, 0, 0] = windows[0, 0, 1, 1] = 5.0  # the maximum of the first window, twice
    for op, inputs, attrs in [("relu", [x], {}), ("maxpool2d", [windows], {"kernel_size": 2})]:
        shapes = tuple(a.shape for a in inputs)
        analytic, numeric, bound, _ = next(gradient_checks(op, shapes, attrs, inputs, _Pattern()))
        assert abs(analytic - numeric) > 0.4 and abs(analytic - numeric) <= bound, (op, analytic, numeric, bound)


def test_every_differentiable_core_op_declares_all_its_gradients() -> None:
    registry = algoswap.registry()
    for name in ("conv2d", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "flatten"):
        spec = registry.spec(name)
        float_inputs = {i.name for i in spec.inputs}
        assert {rule.wrt for rule in spec.gradients} == float_inputs, name
        for rule in spec.gradients:
            assert rule.op is None or registry.spec(rule.op).grad_of == name
