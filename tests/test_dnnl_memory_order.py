"""oneDNN's reductions, broadcasting binary ops and transpose on inputs in another memory order than C's
(channels-last activations, permuted views): run in that order, without copying them, and equal to the
NumPy reference. (Conformance runs C-contiguous inputs; test_layouts_fusion.py channels-last ones of the
cases; here the memory-order paths themselves.)"""

from __future__ import annotations

import numpy as np
import pytest

import algoswap
from helpers import assert_op_close

algoswap_dnnl = pytest.importorskip("algoswap_dnnl", reason="algoswap-dnnl is not installed")
_available = algoswap.registry().backends["dnnl"].availability() if "dnnl" in algoswap.registry().backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"dnnl backend unavailable: {_available}")


def _channels_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _check(op: str, arrays: list[np.ndarray], **attrs: object) -> np.ndarray:
    got = algoswap.ops.call(op, *arrays, algorithm="dnnl:direct", **attrs)
    ref = algoswap.ops.call(op, *[a.astype(np.float64) for a in arrays], algorithm="numpy:direct", **attrs)
    assert_op_close(op, got, ref, arrays, attrs, context=f"dnnl {op} {[a.strides for a in arrays]} {attrs}")
    return got


def test_memory_order_sees_a_permuted_array_without_copying() -> None:
    from algoswap_dnnl._layout import memory_order

    x = _channels_last(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5))
    memory, order = memory_order(x)
    assert order == (0, 2, 3, 1) and memory.flags.c_contiguous and np.shares_memory(memory, x)
    strided = x[:, :, ::2]
    copied, identity = memory_order(strided)
    assert identity == (0, 1, 2, 3) and copied.flags.c_contiguous and np.array_equal(copied, strided)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max"])
@pytest.mark.parametrize("axes, keepdims", [((2, 3), True), ((2, 3), False), ((1,), True), ((1, 2), False), (None, False),
                                            ((0, 3), True)])
def test_reductions_of_channels_last_inputs(op: str, axes: tuple[int, ...] | None, keepdims: bool,
                                            rng: np.random.Generator) -> None:
    """Over H, W (a squeeze-and-excitation block's mean: a pooling window over the NHWC memory), over C (the
    innermost: the reduction primitive), over C and H (no run of the NHWC memory: C order instead)."""
    x = _channels_last(rng.standard_normal((2, 6, 5, 4)).astype(np.float32))
    if axes == (0, 3):  # not one run in C order either: refused, with the reason
        call = algoswap.registry().spec(op).bind([x.shape], ["float32"], {"axes": axes})
        assert "not one run" in str(algoswap.registry().impls[(op, "direct", "dnnl")].check(call))
        return
    _check(op, [x], axes=axes, keepdims=keepdims)


@pytest.mark.parametrize("shape, axes", [
    ((8, 672, 14, 14), (2, 3)), ((4, 1 << 16), (1,)), ((3, 5000, 40), (1,)), ((1 << 20,), None), ((16, 1, 4096), (0, 2)),
])
@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max"])
def test_long_reductions_stay_within_the_bound_of_their_length(op: str, shape: tuple[int, ...], axes: object,
                                                               rng: np.random.Generator) -> None:
    """oneDNN sums in float32 in its own order (vector lanes, then across them; the pooling window's order):
    any order is within n * u of the sum of the magnitudes, which algoswap/testing/_scales.py bounds."""
    x = rng.standard_normal(shape).astype(np.float32) + np.float32(0.5)  # not zero-mean: sums grow, as errors can
    _check(op, [x], axes=axes)


def test_the_squeeze_and_excitation_mean_reads_the_channels_last_memory(monkeypatch: pytest.MonkeyPatch,
                                                                        rng: np.random.Generator) -> None:
    """No copy of the activation: the pooling primitive is handed its NHWC memory itself."""
    from algoswap_dnnl import reduce

    x = _channels_last(rng.standard_normal((2, 8, 6, 6)).astype(np.float32))
    seen: list[np.ndarray] = []
    pool = reduce.dnnl.pool2d_forward
    monkeypatch.setattr(reduce, "dnnl", type("Spy", (), {"pool2d_forward": staticmethod(
        lambda a, **kw: seen.append(a) or pool(a, **kw)), "reduce": reduce.dnnl.reduce})())
    got = reduce.reduce_mean(x, axes=(2, 3), keepdims=True)
    assert len(seen) == 1 and np.shares_memory(seen[0], x)
    np.testing.assert_allclose(got, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-7)


def test_a_nan_in_a_channels_last_maximum_is_kept() -> None:
    x = _channels_last(np.ones((1, 3, 4, 4), np.float32))
    x[0, 1, 2, 3], x[0, 2] = np.nan, -np.inf
    got = algoswap.ops.reduce_max(x, axes=(2, 3), algorithm="dnnl:direct")
    assert np.isnan(got[0, 1]) and got[0, 0] == 1 and got[0, 2] == -np.inf


@pytest.mark.parametrize("op", ["mul", "sub", "div"])
def test_a_gate_on_a_channels_last_activation_stays_channels_last(op: str, rng: np.random.Generator) -> None:
    """(N, C, H, W) in NHWC memory (op) (N, C, 1, 1), either way round: run as (N, H, W, C) and (N, 1, 1, C)."""
    x = _channels_last(rng.uniform(0.5, 2.0, (2, 16, 5, 7)).astype(np.float32))
    gate = rng.uniform(0.5, 2.0, (2, 16, 1, 1)).astype(np.float32)
    for a, b in ((x, gate), (gate, x)):
        out = _check(op, [a, b])
        assert algoswap.is_channels_last(out), f"{op}: the output of a channels-last operand should stay channels-last"


def test_a_broadcast_operand_in_another_memory_order_is_read_in_the_full_ones() -> None:
    x = _channels_last(np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5))
    other = np.asfortranarray(np.arange(20, dtype=np.float32).reshape(4, 5))  # neither order: copied, still right
    _check("mul", [x, other])
    _check("sub", [other, x])


def test_transpose_to_the_memory_order_is_a_view_and_others_reorder_it(rng: np.random.Generator) -> None:
    """ConvNeXt's x.permute(0, 2, 3, 1) of a channels-last activation is its memory, as torch's permute is."""
    x = _channels_last(rng.standard_normal((2, 8, 3, 5)).astype(np.float32))
    nhwc = algoswap.ops.transpose(x, perm=(0, 2, 3, 1), algorithm="dnnl:direct")
    assert np.shares_memory(nhwc, x) and np.array_equal(nhwc, x.transpose(0, 2, 3, 1))
    for perm in [(0, 3, 1, 2), (1, 0, 3, 2), (3, 2, 1, 0)]:
        got = algoswap.ops.transpose(x, perm=perm, algorithm="dnnl:direct")
        assert np.array_equal(got, x.transpose(perm)) and got.flags.c_contiguous, perm


def test_the_permute_back_to_nchw_is_a_channels_last_view(rng: np.random.Generator) -> None:
    """ConvNeXt's permute(0, 3, 1, 2) after its channels-last MLP: that memory seen as a channels-last NCHW
    array (what the next convolution takes), not a dense copy that the runner would copy back to NHWC."""
    nhwc = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    nchw = algoswap.ops.transpose(nhwc, perm=(0, 3, 1, 2), algorithm="dnnl:direct")
    assert np.shares_memory(nchw, nhwc) and algoswap.is_channels_last(nchw)
    assert np.array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
