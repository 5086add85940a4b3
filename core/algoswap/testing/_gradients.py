"""Gradient rules checked against their forward op by finite differences.

For a random direction v and random grad_output g, the rule's gradient G of input a must satisfy
<G, v> = phi'(0), phi(t) = <g, f(a + t v)>, estimated by the central difference D(h) of the reference's
forward op in float64. The two may differ by no more than the rounding of <G, v> (in the precision the
gradient is computed in) plus the error bound of ``central_difference`` (rounding of phi, from the ops'
scales and reduction lengths in algoswap/testing/_scales.py, divided by h; the truncation error; and the
exact error of a kink inside [-h, h]: without that term, a relu input or a max-pooling tie that a fresh
draw puts inside the stencil, about once in a thousand runs, would fail).

G comes from the reference's gradient ops, or from a backend's own implementation of a gradient op
(``check_gradients(op, rng, impl)``), run in float64 where it has it, else in float32 on inputs drawn in
float32 (so that both sides see the same numbers).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

import algoswap

from ._cases import cases_for, reference_name
from ._inputs import bind, draw
from ._scales import op_scale
from ._tolerance import central_difference, tolerance

STEP = 1e-6


def gradient_dtype(impl: algoswap.ImplRecord | None) -> str | None:
    """The dtype a gradient implementation is checked in: float64, else float32 (None: it has neither)."""
    if impl is None:
        return "float64"
    return next((d for d in ("float64", "float32") if d in impl.dtypes), None)


def check_gradients(op: str, rng: np.random.Generator, impl: algoswap.ImplRecord | None = None) -> tuple[int, list[str]]:
    """Every gradient rule of forward ``op`` (``impl`` given: the rules whose op ``impl`` implements, with it)
    on every case of ``op``; return how many gradients were checked and what went wrong."""
    dtype = gradient_dtype(impl)
    checked, failures = 0, []
    if dtype is None:
        return 0, []
    for index, (shapes, attrs) in enumerate(cases_for(op)):
        inputs = [draw(rng, s, dtype) for s in shapes]
        inputs = [a.astype(np.float64) if getattr(a, "dtype", np.dtype(int)).kind == "f" else a for a in inputs]
        for analytic, numeric, bound, where in gradient_checks(op, shapes, attrs, inputs, rng, impl):
            if not abs(analytic - numeric) <= bound:
                failures.append(f"case {index} {shapes} {attrs} of {op}: gradient of {where}: <G, v> = {analytic!r}, finite difference "
                                f"{numeric!r}, |difference| {abs(analytic - numeric):.3g} > bound {bound:.3g}")
            checked += 1
    return checked, failures


def _forward(op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = algoswap.ops.call(op, *inputs, algorithm=reference_name(op), **attrs)
    return out


def _gradient(rule: algoswap.GradRule, call: algoswap.OpCall, arrays: list[Any], index: int, item: int,
              impl: algoswap.ImplRecord | None) -> np.ndarray | str:
    """The rule's gradient in float64, or why ``impl`` does not serve it."""
    if rule.op is None:
        return np.reshape(arrays[0], tuple(call.shapes[index] or ()))
    attrs = rule.attrs_for(call, item)
    if impl is None:
        out: np.ndarray = algoswap.ops.call(rule.op, *arrays, algorithm=reference_name(rule.op), **attrs)
        return out
    dtype = gradient_dtype(impl)
    narrow = [a.astype(dtype) if getattr(a, "dtype", np.dtype(int)).kind == "f" else a for a in arrays]
    shapes = [getattr(a, "shape", None) for a in narrow]
    bound = algoswap.registry().spec(rule.op).bind(shapes, [None if a is None else str(a.dtype) for a in narrow], attrs)
    answer = impl.check(bound)
    if answer is not True:
        return str(answer)
    memory = algoswap.registry().backends[impl.backend].memory
    result = memory.download(impl.callable(*[None if a is None else memory.upload(a) for a in narrow], **bound.attrs))
    return np.asarray(result, dtype=np.float64)


def gradient_checks(op: str, shapes: tuple[Any, ...], attrs: dict[str, Any], inputs: list[Any], rng: Any,
                    impl: algoswap.ImplRecord | None = None) -> Iterator[tuple[float, float, float, str]]:
    """For each gradient rule of ``op`` (with ``impl``: those it implements) and each array it covers: <G, v>,
    the central difference, the bound on their difference, and which input."""
    call = bind(op, shapes, "float64", attrs)
    grad_output = rng.standard_normal(call.out_shape)
    if impl is not None and gradient_dtype(impl) == "float32":
        grad_output = grad_output.astype(np.float32).astype(np.float64)
    output = _forward(op, inputs, attrs)
    grad_output = np.where(np.isfinite(output), grad_output, 0.0)  # an infinite constant (pad's fill) has no slope
    by_name = dict(zip(call.input_names, inputs), grad_output=grad_output, output=output)
    rounding = _rounding(op, inputs, attrs, np.where(np.isfinite(output), output, 0.0), grad_output)
    for rule in algoswap.registry().spec(op).gradients:
        if impl is not None and rule.op != impl.op:
            continue
        positions = [i for i, name in enumerate(call.input_names) if name == rule.wrt]  # several: a variadic input
        for item, index in enumerate(positions):
            if inputs[index] is None:
                continue
            direction = rng.standard_normal(inputs[index].shape)
            arrays = [by_name[name] for name in rule.inputs] if rule.op is not None else [grad_output]
            gradient = _gradient(rule, call, arrays, index, item, impl)
            if isinstance(gradient, str):
                continue
            numeric, bound = central_difference(_phi(op, inputs, index, direction, grad_output, attrs), STEP, rounding)
            bound += _gradient_rounding(rule, call, arrays, item, gradient, direction, gradient_dtype(impl) or "float64")
            yield float(np.sum(gradient * direction)), numeric, bound, f"{rule.wrt}[{item}]"


def _phi(op: str, inputs: list[Any], index: int, direction: np.ndarray, grad_output: np.ndarray,
         attrs: dict[str, Any]) -> Callable[[float], float]:
    """phi(t) = <grad_output, f(a + t v)>, over the outputs finite at t = 0 (grad_output is 0 at the others)."""
    finite = np.isfinite(_forward(op, inputs, attrs))

    def phi(t: float) -> float:
        moved = list(inputs)
        moved[index] = inputs[index] + t * direction
        return float(np.sum(np.where(finite, _forward(op, moved, attrs) * grad_output, 0.0)))
    return phi


def _magnitude(op: str | None, inputs: list[Any], attrs: dict[str, Any], result: np.ndarray) -> tuple[np.ndarray, int]:
    scale, length = (None, 1) if op is None else op_scale(op, inputs, attrs)
    return np.abs(result) if scale is None else np.broadcast_to(scale, result.shape), length


def _rounding(op: str, inputs: list[Any], attrs: dict[str, Any], output: np.ndarray, grad_output: np.ndarray) -> float:
    """A bound on the rounding error of one evaluation of phi (float64)."""
    scale, length = _magnitude(op, inputs, attrs, output)
    return tolerance("float64", length + output.size) * float(np.sum(np.abs(grad_output) * scale))


def _gradient_rounding(rule: algoswap.GradRule, call: algoswap.OpCall, arrays: list[Any], item: int,
                       gradient: np.ndarray, direction: np.ndarray, dtype: str) -> float:
    """A bound on the rounding error of <G, v>, G computed in ``dtype``."""
    scale, length = _magnitude(rule.op, arrays, rule.attrs_for(call, item), gradient)
    return tolerance(dtype, length + gradient.size) * float(np.sum(scale * np.abs(direction)))
