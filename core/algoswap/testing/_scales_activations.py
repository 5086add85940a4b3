"""The scale rules (algoswap/testing/_scales.py) of the activations whose terms can cancel: the magnitude of the
terms each result element is computed from, in every form a backend may compute it in."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

Scale = tuple[Any, int]


_TANH_SCALE = math.sqrt(2 / math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(x / 2))


def _gelu(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """x (1 + g) / 2, g = erf(x / sqrt(2)) or tanh(u): 1 + g cancels for negative x (where it is not
    computed as erfc or a sigmoid)."""
    x = inputs[0]
    gate = _erf(x / math.sqrt(2)) if attrs["approximate"] == "none" else np.tanh(_TANH_SCALE * (x + 0.044715 * x**3))
    return 0.5 * np.abs(x) * (1 + np.abs(gate)), 1


def _gelu_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy (Phi + x phi) exactly, or for the tanh form dy (s + 2 x s (1 - s) u'), s = (1 + tanh u) / 2 (which
    some compute as (1 + t) / 2 (1 + x u' (1 - t)) instead): zero near x = -0.75, where the terms cancel."""
    dy, x = inputs
    if attrs["approximate"] == "none":
        return np.abs(dy) * (0.5 + 0.5 * np.abs(_erf(x / math.sqrt(2))) + np.abs(x) * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)), 1
    t = np.abs(np.tanh(_TANH_SCALE * (x + 0.044715 * x**3)))
    return np.abs(dy) * (1 + t) * (1 + _TANH_SCALE * np.abs(x) * (1 + 0.134145 * x * x)), 1


def _silu_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy s (1 + x (1 - s)), s = sigmoid(x): zero near x = -1.28, where the terms cancel."""
    dy, x = inputs
    s = _sigmoid(x)
    return np.abs(dy) * s * (1 + np.abs(x) * (1 - s)), 1


def _mish_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy (t + x s (1 - t^2)), t = tanh(softplus(x)), or (oneDNN) dy e^x w / d^2 with w = e^3x + 4 e^2x +
    e^x (4x + 6) + 4 (x + 1), d = e^2x + 2 e^x + 2: zero near x = -1.19; the terms of both forms."""
    dy, x = inputs
    t, e = np.tanh(np.logaddexp(0, x)), np.exp(x)
    terms = e * (e**3 + 4 * e**2 + e * (4 * np.abs(x) + 6) + 4 * (np.abs(x) + 1)) / (e**2 + 2 * e + 2) ** 2
    return np.abs(dy) * (np.abs(t) + np.abs(x) * _sigmoid(x) * (1 + t * t) + terms), 1


def _hard_ramp(x: np.ndarray) -> np.ndarray:
    """Where x + 3 is computed and clamped to [0, 6], the magnitude of its terms (|x| + 3), else the clamp."""
    return np.asarray(np.where((x > -3) & (x < 3), np.abs(x) + 3, np.clip(x + 3, 0, 6)))


def _hardswish(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """x * clamp(x + 3, 0, 6) / 6: x + 3 cancels near x = -3."""
    x = inputs[0]
    return np.abs(x) * _hard_ramp(x) / 6, 1


def _hardsigmoid(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """clamp(x + 3, 0, 6) / 6: x + 3 cancels near x = -3."""
    return _hard_ramp(inputs[0]) / 6, 1


def _hardswish_grad(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """dy (x / 3 + 1/2) between -3 and 3: zero at x = -1.5."""
    dy, x = inputs
    return np.abs(dy) * np.where((x > -3) & (x < 3), np.abs(x) / 3 + 0.5, 1), 1


def _elu(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Scale:
    """alpha (exp(x) - 1) below 0, which cancels near 0 where it is not computed as expm1."""
    x = inputs[0]
    return np.where(x > 0, np.abs(x), abs(attrs["alpha"]) * (np.exp(np.minimum(x, 0)) + 1)), 1


ACTIVATION_RULES: dict[str, Callable[[str, list[Any], dict[str, Any]], Scale]] = {
    "gelu": _gelu, "gelu_grad": _gelu_grad, "silu_grad": _silu_grad, "mish_grad": _mish_grad, "hardswish": _hardswish,
    "hardswish_grad": _hardswish_grad, "hardsigmoid": _hardsigmoid, "elu": _elu,
}
