"""Every op's gradient rules, checked against its forward op by finite differences in float64.

For a random direction v and random grad_output g, the rule's gradient G of input a must satisfy
<G, v> = phi'(0), phi(t) = <g, f(a + t v)>, estimated by the central difference D(h). The two may
differ by no more than the rounding of <G, v> plus the error bound of ``helpers.central_difference``
(rounding of phi, from the ops' scales and reduction lengths in tests/op_scales.py, divided by h; the
truncation error; and the exact error of a kink inside [-h, h]: without that term, a relu input or a
max-pooling tie that a fresh draw puts inside the stencil, about once in a thousand runs, would fail).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import pytest

import algoswap
from helpers import central_difference, fail, tolerance
from op_cases import bind, cases_for, draw, reference_name
from op_scales import op_scale

STEP = 1e-6


def _ops_with_gradients() -> list[str]:
    return [name for name, spec in algoswap.registry().ops.items() if spec.gradients]


def _forward(op: str, inputs: list[np.ndarray | None], attrs: dict) -> np.ndarray:
    return algoswap.ops.call(op, *inputs, algorithm=reference_name(op), **attrs)


def _gradient(op: str, rule: algoswap.GradRule, call: algoswap.OpCall, by_name: dict[str, np.ndarray], index: int,
              item: int) -> np.ndarray:
    arrays = [by_name[name] for name in rule.inputs]
    if rule.op is None:
        return by_name["grad_output"].reshape(call.shapes[index])
    return algoswap.ops.call(rule.op, *arrays, algorithm=reference_name(rule.op), **rule.attrs_for(call, item))


@pytest.mark.parametrize("op", _ops_with_gradients())
def test_gradient_rules_match_finite_differences(op: str, rng: np.random.Generator) -> None:
    checked = 0
    for shapes, attrs in cases_for(op):
        inputs = [draw(rng, s, "float64") for s in shapes]
        for analytic, numeric, bound, where in _checks(op, shapes, attrs, inputs, rng):
            if not abs(analytic - numeric) <= bound:
                fail(f"{op}: gradient of {where} on {shapes} {attrs}: <G, v> = {analytic!r}, finite difference "
                     f"{numeric!r}, |difference| {abs(analytic - numeric):.3g} > bound {bound:.3g}")
            checked += 1
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
        analytic, numeric, bound, _ = next(_checks(op, shapes, attrs, inputs, _Pattern()))
        assert abs(analytic - numeric) > 0.4 and abs(analytic - numeric) <= bound, (op, analytic, numeric, bound)


def _checks(op: str, shapes: tuple, attrs: dict, inputs: list, rng: Any) -> Iterator[tuple[float, float, float, str]]:
    """For each gradient rule of ``op`` and each array it covers: <G, v>, the central difference, the bound
    on their difference, and which input."""
    call = bind(op, shapes, "float64", attrs)
    grad_output = rng.standard_normal(call.out_shape)
    output = _forward(op, inputs, attrs)
    by_name = dict(zip(call.input_names, inputs), grad_output=grad_output, output=output)
    rounding = _rounding(op, inputs, attrs, output, grad_output)
    for rule in algoswap.registry().spec(op).gradients:
        positions = [i for i, name in enumerate(call.input_names) if name == rule.wrt]  # several: a variadic input
        for item, index in enumerate(positions):
            if inputs[index] is None:
                continue
            direction = rng.standard_normal(inputs[index].shape)
            gradient = _gradient(op, rule, call, by_name, index, item)
            numeric, bound = central_difference(_phi(op, inputs, index, direction, grad_output, attrs), STEP, rounding)
            bound += _gradient_rounding(rule, call, by_name, index, item, gradient, direction)
            yield float(np.sum(gradient * direction)), numeric, bound, f"{rule.wrt}[{item}]"


def _phi(op: str, inputs: list, index: int, direction: np.ndarray, grad_output: np.ndarray, attrs: dict) -> Callable[[float], float]:
    """phi(t) = <grad_output, f(a + t v)>."""
    def phi(t: float) -> float:
        moved = list(inputs)
        moved[index] = inputs[index] + t * direction
        return float(np.sum(_forward(op, moved, attrs) * grad_output))
    return phi


def _magnitude(op: str | None, inputs: list, attrs: dict, result: np.ndarray) -> tuple[np.ndarray, int]:
    scale, length = (None, 1) if op is None else op_scale(op, inputs, attrs)
    return np.abs(result) if scale is None else np.broadcast_to(scale, result.shape), length


def _rounding(op: str, inputs: list, attrs: dict, output: np.ndarray, grad_output: np.ndarray) -> float:
    """A bound on the rounding error of one evaluation of phi (float64)."""
    scale, length = _magnitude(op, inputs, attrs, output)
    return tolerance("float64", length + output.size) * float(np.sum(np.abs(grad_output) * scale))


def _gradient_rounding(rule: algoswap.GradRule, call: algoswap.OpCall, by_name: dict[str, np.ndarray], index: int,
                       item: int, gradient: np.ndarray, direction: np.ndarray) -> float:
    """A bound on the rounding error of <G, v> (float64)."""
    arrays = [by_name[name] for name in rule.inputs]
    scale, length = _magnitude(rule.op, arrays, rule.attrs_for(call, item), gradient)
    return tolerance("float64", length + gradient.size) * float(np.sum(scale * np.abs(direction)))


def test_every_differentiable_core_op_declares_all_its_gradients() -> None:
    registry = algoswap.registry()
    for name in ("conv2d", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "flatten"):
        spec = registry.spec(name)
        float_inputs = {i.name for i in spec.inputs}
        assert {rule.wrt for rule in spec.gradients} == float_inputs, name
        for rule in spec.gradients:
            assert rule.op is None or registry.spec(rule.op).grad_of == name
