"""Every op's gradient rules, checked against its forward op by finite differences in float64.

For a random direction v and random grad_output g, the rule's gradient G of input a must satisfy
<G, v> = d/dt <g, f(a + t v)> at t = 0, estimated by central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import algoswap
from op_cases import bind, cases_for, draw, reference_name


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
    spec = algoswap.registry().spec(op)
    checked = 0
    for shapes, attrs in cases_for(op):
        call = bind(op, shapes, "float64", attrs)
        inputs = [draw(rng, s, "float64") for s in shapes]
        grad_output = rng.standard_normal(call.out_shape)
        output = _forward(op, inputs, attrs)
        by_name = dict(zip(call.input_names, inputs), grad_output=grad_output, output=output)
        for rule in spec.gradients:
            positions = [i for i, name in enumerate(call.input_names) if name == rule.wrt]  # several: a variadic input
            for item, index in enumerate(positions):
                if inputs[index] is None:
                    continue
                direction = rng.standard_normal(inputs[index].shape)
                analytic = float(np.sum(_gradient(op, rule, call, by_name, index, item) * direction))
                numeric = _directional_derivative(op, inputs, index, direction, grad_output, attrs)
                assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (op, rule.wrt, item, shapes, attrs, analytic, numeric)
                checked += 1
    assert checked >= len(cases_for(op)), f"{op}: only {checked} gradients checked"


def _directional_derivative(op: str, inputs: list, index: int, direction: np.ndarray, grad_output: np.ndarray, attrs: dict) -> float:
    step = 1e-6
    values = []
    for sign in (1, -1):
        moved = list(inputs)
        moved[index] = inputs[index] + sign * step * direction
        values.append(float(np.sum(_forward(op, moved, attrs) * grad_output)))
    return (values[0] - values[1]) / (2 * step)


def test_every_differentiable_core_op_declares_all_its_gradients() -> None:
    registry = algoswap.registry()
    for name in ("conv2d", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "flatten"):
        spec = registry.spec(name)
        float_inputs = {i.name for i in spec.inputs}
        assert {rule.wrt for rule in spec.gradients} == float_inputs, name
        for rule in spec.gradients:
            assert rule.op is None or registry.spec(rule.op).grad_of == name
