"""Every implementation of the activations and their gradients at their kinks (hardtanh at its bounds,
hardswish and hardsigmoid at +-3, elu at 0, ...), at +-0, +-inf and NaN, with grad_output 1, a draw,
inf and NaN: exactly as torch has them (tests/torch_oracle.py), which the random draws of the other
suites never reach."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import fail
from algoswap.testing._nonfinite import compare
from algoswap.testing._cases import implementation_params

torch = pytest.importorskip("torch")

from torch_oracle import TORCH, to_torch  # noqa: E402

TOLERANCE = {"float32": 2e-5, "float64": 1e-11}
# op -> (its attributes, the inputs where it has a kink or changes form)
KINKS: dict[str, list[tuple[dict[str, Any], list[float]]]] = {
    "hardtanh": [({}, [-1.0, 1.0]), ({"min_val": 0.0, "max_val": 6.0}, [0.0, 6.0]), ({"min_val": 0.5, "max_val": 0.5}, [0.5])],
    "hardswish": [({}, [-3.0, 3.0])],
    "hardsigmoid": [({}, [-3.0, 3.0])],
    "elu": [({}, [0.0]), ({"alpha": 0.5}, [0.0])],
    "silu": [({}, [])],
    "gelu": [({"approximate": "none"}, []), ({"approximate": "tanh"}, [])],
    "mish": [({}, [])],
}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, np.inf, -np.inf, np.nan]


def _params() -> list[Any]:
    ops = set(KINKS) | {f"{op}_grad" for op in KINKS}
    return [p for p in implementation_params(tuple(TOLERANCE)) if p.values[0].op in ops]


def _inputs(op: str, kinks: list[float], dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    """x: each kink and special value with grad_output 1, a draw, inf and NaN (for a gradient op), 64 in all."""
    x = np.array(kinks + SPECIAL, np.float64)
    if not op.endswith("_grad"):
        return [np.resize(x, 64).astype(dtype)]
    dy = np.concatenate([np.full(x.size, 1.0), rng.standard_normal(x.size), np.full(x.size, np.inf), np.full(x.size, np.nan)])
    return [np.resize(dy, 64).astype(dtype), np.resize(np.tile(x, 4), 64).astype(dtype)]


@pytest.mark.parametrize("impl, dtype", _params())
def test_kinks_and_special_values_follow_torch(impl: algoswap.ImplRecord, dtype: str, rng: np.random.Generator) -> None:
    memory = algoswap.registry().backends[impl.backend].memory
    for attrs, kinks in KINKS[impl.op.removesuffix("_grad")]:
        inputs = _inputs(impl.op, kinks, dtype, rng)
        call = algoswap.registry().spec(impl.op).bind([a.shape for a in inputs], [dtype] * len(inputs), attrs)
        if impl.check(call) is not True:
            continue
        expected = TORCH[impl.op](*[to_torch(a) for a in inputs], **call.attrs).detach().numpy()
        with np.errstate(all="ignore"):
            got = np.asarray(memory.download(impl.callable(*[memory.upload(a) for a in inputs], **call.attrs)))
        problem = compare(got, expected, "exact", TOLERANCE[dtype], float(np.sqrt(np.mean(np.square(expected[np.isfinite(expected)])))))
        if problem:
            where = ", ".join(f"x={inputs[-1][i]!r}" for i in np.nonzero(~np.isclose(got, expected, equal_nan=True))[0][:6])
            fail(f"{impl.op} {impl.qualified} ({dtype}) {attrs}: {problem} [{where}]")


def test_bad_attributes_are_refused_naming_the_op_and_argument() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(algoswap.OpArgumentError, match=r"hardtanh.*'max_val' got 1\.0; expected a value >= min_val \(2\.0\)"):
        algoswap.ops.hardtanh(x, min_val=2.0, max_val=1.0)
    with pytest.raises(algoswap.OpArgumentError, match=r"hardtanh_grad.*'max_val'"):
        algoswap.ops.hardtanh_grad(x, x, min_val=2.0, max_val=1.0)
    with pytest.raises(algoswap.OpArgumentError, match=r"gelu.*'approximate' got 'erf'.*one of 'none', 'tanh'"):
        algoswap.ops.gelu(x, approximate="erf")
    with pytest.raises(algoswap.OpArgumentError, match=r"elu.*'alpha'.*finite"):
        algoswap.ops.elu(x, alpha=float("inf"))
    w = np.ones((1, 1, 1, 1), np.float32)
    with pytest.raises(algoswap.OpArgumentError, match=r"conv2d_fused.*'activation' got 'mish'.*'relu6', 'silu', 'hardswish', 'gelu'"):
        algoswap.ops.conv2d_fused(x.reshape(1, 1, 1, 3), w, activation="mish")
    assert np.array_equal(algoswap.ops.hardtanh(np.array([-1.0, 0.5, 2.0]), min_val=0.5, max_val=0.5), [0.5, 0.5, 0.5])
