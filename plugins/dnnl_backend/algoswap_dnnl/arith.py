"""Elementwise arithmetic on oneDNN primitives: sub, mul and div on binary (broadcasting as in
elementwise.py), the unary and scalar-constant ops on eltwise, and their gradients. div_grad_b,
-grad_output * a / b**2, is one binary primitive: mul, then post-ops div by b twice and linear -x.

eltwise constants are oneDNN's: linear is alpha * x + beta (neg, add_scalar, mul_scalar, sub_grad_b),
pow is alpha * x ** beta (rdiv_scalar, pow_scalar), clip_v2 clips to [alpha, beta] (clamp_min). oneDNN's pow has fast paths only for some
exponents (2, -1, 0.5: about 7 ms on 12.8 M floats here; 3 or -0.5: about 50 ms), so rsqrt is sqrt
then pow(-1), and rsqrt's gradient -grad_output * y**3 / 2 is -y**2 / 2 (pow), times y, times
grad_output (binary_mul). Other gradients come from eltwise backward (d(alpha * x ** beta) = alpha * beta *
x ** (beta - 1)). A gradient that must be summed down to a broadcast operand's shape is a
reduction, which oneDNN 3.2 runs with its reference kernel: the predicates refuse those calls and say so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl, refusal
from .elementwise import binary, plan, supports_binary

Shape = tuple[int, ...]
Step = tuple[str, float, float]  # eltwise kind, alpha, beta
# op -> the eltwise steps, in order, for its attributes
_ELTWISE: dict[str, Any] = {
    "neg": lambda a: [("linear", -1.0, 0.0)],
    "add_scalar": lambda a: [("linear", 1.0, a["value"])],
    "mul_scalar": lambda a: [("linear", a["value"], 0.0)],
    "sqrt": lambda a: [("sqrt", 0.0, 0.0)],
    "rsqrt": lambda a: [("sqrt", 0.0, 0.0), ("pow", 1.0, -1.0)],
    "rdiv_scalar": lambda a: [("pow", a["value"], -1.0)],
    "pow_scalar": lambda a: [("pow", 1.0, a["exponent"])],
    "clamp_min": lambda a: [("clip_v2", a["value"], float("inf"))],
    "sub_grad_b": lambda a: [("linear", -1.0, 0.0)],
    "rsqrt_grad": lambda a: [("pow", -0.5, 2.0)],  # of y, then times y and grad_output
}
# gradient op -> (eltwise kind, alpha, beta) of the backward primitive, read at its second input
_BACKWARD: dict[str, Any] = {
    "sqrt_grad": lambda a: ("sqrt", 0.0, 0.0),
    "rdiv_scalar_grad": lambda a: ("pow", a["value"], -1.0),
    "pow_scalar_grad": lambda a: ("pow", 1.0, a["exponent"]),
}
_REDUCTION = ("the gradient is summed from {full} down to the operand's shape {shape}: a reduction, and oneDNN 3.2's "
              "reduction primitive runs its reference kernel for it")


def _eltwise(op: str, x: np.ndarray, **attrs: float) -> np.ndarray:
    out = np.ascontiguousarray(x)
    for kind, alpha, beta in _ELTWISE[op](attrs):
        out = dnnl.eltwise(out, kind, float(alpha), float(beta))
    return out.reshape(x.shape)  # a 0-D input is run as shape (1,), oneDNN having no 0-D memory


def _eltwise_grad(op: str, dy: np.ndarray, data: np.ndarray, **attrs: float) -> np.ndarray:
    kind, alpha, beta = _BACKWARD[op](attrs)
    return dnnl.eltwise_grad(np.ascontiguousarray(dy), np.ascontiguousarray(data), kind, float(alpha), float(beta))


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return binary("sub", a, b)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return binary("mul", a, b)


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return binary("div", a, b)


def sub_grad_b(dy: np.ndarray, *, shape: Shape) -> np.ndarray:
    """-dy (b had the output's shape)."""
    return _eltwise("sub_grad_b", dy)


def mul_grad(dy: np.ndarray, other: np.ndarray, *, shape: Shape) -> np.ndarray:
    """dy * other (the operand had the output's shape; other may broadcast)."""
    return binary("mul", dy, other)


def div_grad_a(dy: np.ndarray, b: np.ndarray, *, shape: Shape) -> np.ndarray:
    """dy / b (a had the output's shape; b may broadcast)."""
    return binary("div", dy, b)


def div_grad_b(dy: np.ndarray, a: np.ndarray, b: np.ndarray, *, shape: Shape) -> np.ndarray:
    """-dy * a / b**2 (b had the output's shape; a may broadcast)."""
    return binary("mul", dy, a, [("div", b, 0.0, 0.0), ("div", b, 0.0, 0.0), ("linear", None, -1.0, 0.0)])


def neg(x: np.ndarray) -> np.ndarray:
    return _eltwise("neg", x)


def sqrt(x: np.ndarray) -> np.ndarray:
    return _eltwise("sqrt", x)


def sqrt_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dy / (2 y): eltwise_sqrt_use_dst_for_bwd."""
    return _eltwise_grad("sqrt_grad", dy, y)


def rsqrt(x: np.ndarray) -> np.ndarray:
    return _eltwise("rsqrt", x)


def rsqrt_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """-dy * y**3 / 2: eltwise_pow (-y**2 / 2), then binary_mul by y and by dy."""
    y = np.ascontiguousarray(y)
    return binary("mul", binary("mul", _eltwise("rsqrt_grad", y), y), np.ascontiguousarray(dy))


def add_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    return _eltwise("add_scalar", x, value=value)


def mul_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    return _eltwise("mul_scalar", x, value=value)


def rdiv_scalar(x: np.ndarray, *, value: float) -> np.ndarray:
    """value * x ** -1."""
    return _eltwise("rdiv_scalar", x, value=value)


def rdiv_scalar_grad(dy: np.ndarray, x: np.ndarray, *, value: float) -> np.ndarray:
    return _eltwise_grad("rdiv_scalar_grad", dy, x, value=value)


def pow_scalar(x: np.ndarray, *, exponent: float) -> np.ndarray:
    return _eltwise("pow_scalar", x, exponent=exponent)


def pow_scalar_grad(dy: np.ndarray, x: np.ndarray, *, exponent: float) -> np.ndarray:
    return _eltwise_grad("pow_scalar_grad", dy, x, exponent=exponent)


def clamp_min(x: np.ndarray, *, value: float) -> np.ndarray:
    """clip_v2 to [value, inf] (the extension keeps NaN, which oneDNN's clip turns into a bound)."""
    return _eltwise("clamp_min", x, value=value)


# ---------------------------------------------------------------------- selection and kernels

# op -> (binary kind, its inputs as src0 and src1, post-ops with their arrays named by input)
_BINARY: dict[str, tuple[str, str, str, list[Any]]] = {
    "sub": ("sub", "a", "b", []), "mul": ("mul", "a", "b", []), "div": ("div", "a", "b", []),
    "mul_grad": ("mul", "grad_output", "other", []), "div_grad_a": ("div", "grad_output", "other", []),
    "div_grad_b": ("mul", "grad_output", "a", [("div", "b", 0.0, 0.0), ("div", "b", 0.0, 0.0), ("linear", None, -1.0, 0.0)]),
}


def _size(call: Any) -> int:
    return int(np.prod(call.out_shape, dtype=np.int64))


def _eltwise_plans(call: Any) -> list[Any]:
    """The primitives the call runs, in order."""
    if call.op in _BACKWARD:
        kind, alpha, beta = _BACKWARD[call.op](call.attrs)
        return [dnnl.eltwise_grad_impl(_size(call), kind, float(alpha), float(beta))]
    plans = [dnnl.eltwise_impl(_size(call), kind, float(alpha), beta=float(beta)) for kind, alpha, beta in _ELTWISE[call.op](call.attrs)]
    if call.op == "rsqrt_grad":
        plans += [dnnl.binary_impl([_size(call)], [_size(call)], "mul")] * 2
    return plans


def supports(call: Any) -> bool | str:
    """Binary ops: oneDNN's broadcasting rule; gradients: no reduction; then oneDNN is asked."""
    if "shape" in call.attrs and call.attrs["shape"] != call.shape("grad_output"):
        return _REDUCTION.format(full=call.shape("grad_output"), shape=call.attrs["shape"])
    if call.op in _BINARY:
        kind, a, b, post = _BINARY[call.op]
        return supports_binary(call, kind, a, b, post)
    if _size(call) == 0:
        return True
    slow = _slow_pow(call)
    if slow:
        return slow
    return refusal(lambda: _eltwise_plans(call))


# Exponents oneDNN 3.2's eltwise pow has fast paths for (measured: ~7 ms on 12.8 M floats; others ~50 ms,
# about 2x NumPy's time): other exponents are refused so that the registry picks another backend.
FAST_EXPONENTS = (-1.0, 0.5, 1.0, 2.0)


def _slow_pow(call: Any) -> str:
    if call.op not in ("pow_scalar", "pow_scalar_grad"):
        return ""
    exponent = float(call.attrs["exponent"])
    if exponent in FAST_EXPONENTS:
        return ""
    return (f"oneDNN 3.2's eltwise pow has fast kernels only for exponents {FAST_EXPONENTS}; exponent {exponent:g} "
            "would run about 2x slower than NumPy")


def kernel(call: Any) -> str:
    if _size(call) == 0:
        return "none (empty array)"
    if call.op in _BINARY:
        kind, a, b, post = _BINARY[call.op]
        return str(plan(call, kind, a, b, post))
    return " + ".join(str(plan.impl) for plan in _eltwise_plans(call))

