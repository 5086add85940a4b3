"""interpolate against torch.nn.functional.interpolate: the output size rules, the errors torch raises, and,
over many geometries, that the NumPy reference reads exactly the elements torch reads (NaN and +inf over
each input row and column in turn: an output is NaN or infinite exactly where torch's is, in float32 and
float64, forward and gradient). The conformance suite then holds every other implementation to the
reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import algoswap
from algoswap.testing._nonfinite import classes
from helpers import assert_op_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

_SPEC = algoswap.registry().spec("interpolate")
_SIZES = [(1, 3), (2, 5), (3, 7), (4, 8), (5, 3), (6, 13), (7, 4), (10, 21)]
_FACTORS = [0.5, 0.7, 1.1, 1.5, 2.0, 2.01, 2.3, 3.0, 3.01]


def _fits(shape: tuple[int, ...], attrs: dict[str, Any]) -> bool:
    factors = np.broadcast_to(attrs.get("scale_factor", 1.0), 2)
    return all(int(extent * factor) >= 1 for extent, factor in zip(shape[2:], factors))


def _geometries() -> list[Any]:
    """(input shape, F.interpolate keywords) over sizes, scale factors and modes (outputs of at least 1x1)."""
    found = []
    for mode, corners in (("nearest", None), ("bilinear", False), ("bilinear", True), ("bicubic", False), ("bicubic", True)):
        extra = {"mode": mode} if corners is None else {"mode": mode, "align_corners": corners}
        for (h, w), (oh, ow) in zip(_SIZES, _SIZES[3:] + _SIZES[:3]):
            found.append(((1, 2, h, w), {"size": (oh, ow), **extra}))
        for i, factor in enumerate(_FACTORS):
            h, w = _SIZES[i % len(_SIZES)]
            found.append(((1, 2, h, w), {"scale_factor": factor, **extra}))
            found.append(((1, 2, w, h), {"scale_factor": (1.0, factor), "recompute_scale_factor": True, **extra}))
    return [(shape, attrs) for shape, attrs in found if _fits(shape, attrs)]


def _planted(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    """Copies of a random input with NaN, then +inf, over one whole row, then one whole column, each in turn:
    the outputs that read it become NaN or infinite, so these show exactly which elements each output reads."""
    clean = rng.standard_normal(shape).astype(dtype)
    trials = []
    for value in (np.nan, np.inf):
        for axis in (2, 3):
            for index in range(shape[axis]):
                planted = clean.copy()
                planted[(slice(None),) * axis + (index,)] = value
                trials.append(planted)
    return trials


def _torch(x: np.ndarray, **attrs: Any) -> np.ndarray:
    return F.interpolate(torch.from_numpy(x), **attrs).numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_reference_reads_the_elements_torch_reads(dtype: str, rng: np.random.Generator) -> None:
    for shape, attrs in _geometries():
        call = _SPEC.bind([shape], [dtype], attrs)
        clean = rng.standard_normal(shape).astype(dtype)
        expected = _torch(clean.astype(np.float64), **attrs)
        got = algoswap.ops.interpolate(clean, algorithm="numpy:direct", **attrs)
        assert got.shape == expected.shape == call.out_shape, (shape, attrs)
        assert_op_close("interpolate", got, expected, [clean], attrs, context=f"{shape} {attrs}")
        for planted in _planted(rng, shape, dtype):
            with np.errstate(invalid="ignore"):  # 0 * inf
                got = algoswap.ops.interpolate(planted, algorithm="numpy:direct", **attrs)
            wrong = classes(got) != classes(_torch(planted, **attrs))
            assert not wrong.any(), f"{shape} {attrs} {dtype}: NaN/inf not where torch has them at {np.argwhere(wrong)[:4]}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_reference_gradient_reaches_the_elements_torch_does(dtype: str, rng: np.random.Generator) -> None:
    for shape, attrs in _geometries():
        call = _SPEC.bind([shape], [dtype], attrs)
        grad_attrs = {"input_size": shape, **{k: call.attrs[k] for k in ("scale_factor", "mode", "align_corners")}}
        for dy in _planted(rng, call.out_shape, dtype):
            x = torch.zeros(shape, dtype=getattr(torch, dtype), requires_grad=True)
            F.interpolate(x, **attrs).backward(torch.from_numpy(dy))
            with np.errstate(invalid="ignore"):
                got = algoswap.ops.interpolate_grad(dy, algorithm="numpy:direct", **grad_attrs)
            wrong = classes(got) != classes(x.grad.numpy())
            assert not wrong.any(), f"{shape} {attrs} {dtype}: gradient NaN/inf not where torch has them"


@pytest.mark.parametrize("attrs", [
    {"size": 3}, {"size": (2, 9)}, {"scale_factor": 1.5}, {"scale_factor": (0.5, 3)},
    {"scale_factor": 1.7, "recompute_scale_factor": True}, {"scale_factor": 2.5, "recompute_scale_factor": False},
])
def test_output_sizes_follow_torch(attrs: dict[str, Any]) -> None:
    x = np.zeros((1, 2, 5, 7), np.float32)
    assert algoswap.ops.interpolate(x, **attrs).shape == _torch(x, **attrs).shape


def test_the_canonical_form_names_both_size_and_scale_factor() -> None:
    """Bound again, the resolved attributes give the same call (the coordinates keep the scale factor)."""
    call = _SPEC.bind([(1, 2, 5, 7)], ["float32"], {"scale_factor": 1.5})
    assert call.attrs["size"] == (7, 10) and call.attrs["scale_factor"] == (1.5, 1.5)
    assert _SPEC.bind([(1, 2, 5, 7)], ["float32"], dict(call.attrs)).attrs == call.attrs


@pytest.mark.parametrize("attrs, argument", [
    ({}, "size"),
    ({"size": 4, "scale_factor": 2.0}, "scale_factor"),
    ({"size": 4, "recompute_scale_factor": True}, "recompute_scale_factor"),
    ({"scale_factor": 2.0, "align_corners": False}, "align_corners"),
    ({"scale_factor": 0.1}, "size"),
    ({"scale_factor": -1.0}, "scale_factor"),
    ({"size": 3, "mode": "linear"}, "mode"),
])
def test_what_torch_refuses_is_an_error_naming_the_argument(attrs: dict[str, Any], argument: str) -> None:
    x = np.zeros((1, 2, 5, 7), np.float32)
    with pytest.raises(algoswap.OpArgumentError, match=f"interpolate: argument '{argument}'"):
        algoswap.ops.interpolate(x, **attrs)
    with pytest.raises((ValueError, RuntimeError, NotImplementedError)):
        _torch(x, **attrs)


@pytest.mark.parametrize("mode", ["area", "nearest-exact", "trilinear"])
def test_modes_torch_has_and_the_spec_lacks_are_refused(mode: str) -> None:
    with pytest.raises(algoswap.OpArgumentError, match="argument 'mode'.*'nearest', 'bilinear', 'bicubic'"):
        algoswap.ops.interpolate(np.zeros((1, 2, 5, 7), np.float32), size=3, mode=mode)


def test_an_empty_input_plane_is_refused_as_torch_does() -> None:
    with pytest.raises(algoswap.OpArgumentError, match="argument 'input'"):
        algoswap.ops.interpolate(np.zeros((1, 2, 0, 7), np.float32), size=3)
    assert algoswap.ops.interpolate(np.zeros((0, 2, 4, 4), np.float32), scale_factor=2).shape == (0, 2, 8, 8)


def test_bicubic_is_refused_by_dnnl_with_the_reason() -> None:
    """oneDNN's resampling has no cubic mode: the default request is served by another backend, saying why."""
    if "dnnl" not in algoswap.registry().backends:
        pytest.skip("the dnnl backend is not installed")
    selection = algoswap.select("interpolate", [(1, 2, 6, 8)], "float32", "default", size=(12, 16), mode="bicubic")
    assert selection.backend.name != "dnnl"
    assert "no bicubic mode" in dict(selection.rejected)["dnnl:direct"]
    bilinear = algoswap.select("interpolate", [(1, 2, 6, 8)], "float32", "default", size=(12, 16), mode="bilinear")
    assert "no bicubic" not in dict(bilinear.rejected).get("dnnl:direct", "")
