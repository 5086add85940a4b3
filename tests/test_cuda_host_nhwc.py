"""The CUDA backend's kernels of issue 16's channels-last work, run on the host (tests/cuda_host.py: each raw kernel
as host C++, NumPy in CuPy's place): the float16 convolutions' non-finite scan (_exact.flag_nonfinite: NaN and
infinities at every position and alignment, several arrays in one launch, any memory order), the poolings in NHWC
memory order, the tiled transposes between NCHW and NHWC, and the element-wise ops that keep their input's memory
order. The GPU runs the same through tests/test_cuda_nhwc.py.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator

import numpy as np
import pytest

from cuda_host import COMPILER, fake_cupy
from helpers import fail

pytest.importorskip("cupy", reason="the CUDA backend's modules import CuPy")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no host C++ compiler")

FLOATS = ("float16", "bfloat16", "float32", "float64")
MODULES = ("_types", "_runtime", "_transpose", "_kernels", "_epilogue", "_exact", "_pool_kernels", "pool", "_order", "activation",
           "reduce", "arith", "elementwise")


def _dtype(name: str) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


@pytest.fixture
def on_the_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in MODULES:
        importlib.import_module(f"algoswap_cuda.{name}")
    yield from fake_cupy(monkeypatch)


def _largest(dtype: np.dtype[Any]) -> float:
    return float(ml_dtypes.finfo(dtype).max) if dtype.name == "bfloat16" else float(np.finfo(dtype).max)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_scan_flags_nan_and_infinity_at_every_position_and_alignment(on_the_host: None, dtype: str) -> None:
    """Arrays starting at every element offset from a 16-byte boundary (so a scalar head, the 16-byte body and a
    scalar tail all vary), with NaN, +inf or -inf planted at each position, alone or as the last of several arrays;
    the largest finite values, subnormals and -0 raise nothing."""
    from algoswap_cuda import _exact

    numpy_dtype = _dtype(dtype)
    per = 16 // numpy_dtype.itemsize
    tiny = float(ml_dtypes.finfo(numpy_dtype).smallest_subnormal)
    for offset in range(per + 1):
        for n in (1, per - 1, per, 2 * per + 3, 37):
            buffer = np.zeros(offset + n + per, numpy_dtype)
            x = buffer[offset:offset + n]
            x[:] = np.resize(np.array([_largest(numpy_dtype), -_largest(numpy_dtype), tiny, -0.0, 1.5], numpy_dtype), n)
            other = np.ones(5, numpy_dtype)
            if _exact.flag_nonfinite((x, other)).any():
                fail(f"{dtype}: finite values flagged (offset {offset}, n {n})")
            for position in range(n):
                for value in (np.nan, np.inf, -np.inf):
                    kept = x[position].copy()
                    x[position] = value
                    for arrays in ((x,), (other, other, x), (other, other, other, x)):
                        if not _exact.flag_nonfinite(arrays).any():
                            fail(f"{dtype}: {value} at {position} of {n} (offset {offset}, array {len(arrays)}) not flagged")
                    x[position] = kept


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_scan_reads_every_thread_share_and_any_memory_order(on_the_host: None, dtype: str) -> None:
    """Grids of several threads (each its share of head, body and tail), a channels-last view, a transposed view
    and a view with gaps (copied first: its memory holds elements that are not the array's)."""
    from algoswap_cuda import _exact

    numpy_dtype = _dtype(dtype)
    x = np.zeros(200, numpy_dtype)[3:]
    scan = _exact._scan(dtype)
    for blocks in (1, 2, 3, 7, 64):
        for position in (0, 1, 5, 100, x.size - 1):
            x[:] = 0
            x[position] = np.inf
            flag = np.full(blocks + 1, 7, np.int32)  # each block writes its own slot, and only that
            scan((blocks,), (256,), (x, np.int64(x.size), x, np.int64(0), x, np.int64(0), x, np.int64(0), flag))
            assert flag[:blocks].sum() == 1 and flag[blocks] == 7, (blocks, position, flag)
    nhwc = np.zeros((2, 3, 4, 5), numpy_dtype).transpose(0, 3, 1, 2)
    nhwc[1, 4, 2, 3] = np.nan
    assert _exact.flag_nonfinite((nhwc,)).any()
    transposed = np.zeros((6, 7), numpy_dtype).T
    transposed[6, 5] = -np.inf
    assert _exact.flag_nonfinite((transposed,)).any()
    gaps = np.zeros(20, numpy_dtype)
    gaps[1] = np.nan  # between the elements of the view
    assert not _exact.flag_nonfinite((gaps[::2],)).any()
    gaps[2] = np.nan
    assert _exact.flag_nonfinite((gaps[::2],)).any()
    assert not _exact.flag_nonfinite((np.zeros(0, numpy_dtype),)).any()


def _nhwc(array: np.ndarray, offset: int = 0) -> np.ndarray:
    """``array`` (NCHW) as a channels-last array, its memory starting ``offset`` elements into a buffer."""
    n, c, h, w = array.shape
    buffer = np.empty(offset + array.size, array.dtype)
    memory = buffer[offset:].reshape(n, h, w, c)
    memory[...] = array.transpose(0, 2, 3, 1)
    return memory.transpose(0, 3, 1, 2)


def _same(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.shape == expected.shape and np.array_equal(got.astype(np.float64), expected.astype(np.float64), equal_nan=True)


POOLINGS: list[tuple[str, dict[str, Any]]] = [
    ("maxpool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": False}),
    ("maxpool2d", {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True}),
    ("avgpool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "ceil_mode": True, "count_include_pad": True,
                   "divisor_override": None}),
    ("avgpool2d", {"kernel_size": (2, 2), "stride": (2, 1), "padding": (1, 0), "ceil_mode": False,
                   "count_include_pad": False, "divisor_override": None}),
    ("avgpool2d", {"kernel_size": (3, 2), "stride": (1, 1), "padding": (0, 1), "ceil_mode": False, "count_include_pad": True,
                   "divisor_override": 5}),
    ("adaptiveavgpool2d", {"output_size": (1, 1)}),
    ("adaptiveavgpool2d", {"output_size": (3, 2)}),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op, attrs", POOLINGS)
def test_channels_last_poolings_match_the_nchw_kernels(on_the_host: None, op: str, attrs: dict[str, Any], dtype: str,
                                                       rng: np.random.Generator) -> None:
    """A channels-last input is pooled where it lies into a channels-last output holding what the NCHW kernel gives
    (bit for bit: the same sums in the same order), NaN and infinities included: channel counts that fill 16-byte
    groups and counts that do not, and memory that starts off a 16-byte boundary (one channel per thread then)."""
    from algoswap import is_channels_last
    from algoswap_cuda import pool

    numpy_dtype = _dtype(dtype)
    for channels, offset in ((16, 0), (24, 0), (5, 0), (16, 1)):
        x = rng.standard_normal((2, channels, 7, 6)).astype(numpy_dtype)
        x[0, 1, 2, 3], x[1, channels - 1, 0, 0], x[1, 2, 6, 5] = np.nan, np.inf, -np.inf
        expected = getattr(pool, op)(x, **attrs)
        got = getattr(pool, op)(_nhwc(x, offset), **attrs)
        if not _same(got, expected):
            fail(f"{op} {attrs} {dtype}, {channels} channels, offset {offset}: NHWC differs from NCHW")
        assert is_channels_last(got) or got.shape[2] * got.shape[3] == 1, got.strides


@pytest.mark.parametrize("dtype", FLOATS)
def test_tiled_transposes_between_nchw_and_nhwc(on_the_host: None, dtype: str, rng: np.random.Generator) -> None:
    """_runtime.channels_last and _runtime.contiguous through the tiled transpose: images of 3 channels (a flat
    tile), of channels and pixels that are and are not multiples of the tile, one pixel, one channel."""
    from algoswap import is_channels_last
    from algoswap_cuda import _runtime, _transpose

    for shape in ((2, 3, 17, 19), (1, 64, 8, 8), (3, 40, 5, 7), (2, 33, 1, 1), (2, 1, 6, 5), (1, 100, 2, 3)):
        x = rng.standard_normal(shape).astype(_dtype(dtype))
        nhwc = _runtime.channels_last(x)
        assert nhwc.transpose(0, 2, 3, 1).flags.c_contiguous and np.array_equal(nhwc, x), (shape, nhwc.strides)
        back = _runtime.contiguous(nhwc)
        assert back.flags.c_contiguous and np.array_equal(back, x), shape
        if is_channels_last(nhwc):
            out = np.zeros(x.shape, x.dtype)
            _transpose.transpose(nhwc.transpose(0, 2, 3, 1), out, shape[2] * shape[3], shape[1])
            assert np.array_equal(out, x), shape
    assert _transpose.tile(3, 50176) == (4, 256) and _transpose.tile(50176, 3) == (256, 4) and _transpose.tile(64, 64) == (32, 32)


def _rounded_once(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_ops_keep_a_channels_last_operand_in_its_order(on_the_host: None, dtype: str, rng: np.random.Generator) -> None:
    """x * s with s per (image, channel) or per channel, on either side, in 16-byte groups of channels or one by
    one; x + y of two channels-last arrays and of a channels-last and a C-contiguous one; a broadcast over rows:
    each result channels-last and, in the half types, the float32 result rounded once."""
    from algoswap import is_channels_last
    from algoswap_cuda import arith, elementwise

    numpy_dtype = _dtype(dtype)
    wide = np.float64 if dtype == "float64" else np.float32
    functions = {"add": elementwise.add, "sub": arith.sub, "mul": arith.mul, "div": arith.div}
    symbols = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    for channels, offset in ((16, 0), (6, 0), (16, 1)):
        x = rng.standard_normal((2, channels, 3, 5)).astype(numpy_dtype)
        x[1, 2, 1, 1] = np.inf
        others = [rng.standard_normal(shape).astype(numpy_dtype) + 2 for shape in
                  ((2, channels, 1, 1), (1, channels, 1, 1), (channels, 1, 1), (2, 1, 1, 1), (2, channels, 3, 5), (3, 5))]
        others.append(_nhwc(others[4]))
        for op, function in functions.items():
            for other in others:
                for a, b in ((_nhwc(x, offset), other), (other, _nhwc(x, offset))):
                    got = function(a, b)
                    with np.errstate(all="ignore"):
                        expected = _rounded_once(symbols[op](a.astype(wide), b.astype(wide)), numpy_dtype)
                    where = f"{op} {dtype}: {a.shape} {a.strides} and {b.shape} {b.strides}"
                    assert is_channels_last(got), where
                    if not _same(got, expected):
                        fail(f"{where}: differs from the rounded float result")
    c_contiguous = functions["mul"](x, others[0])
    assert c_contiguous.flags.c_contiguous and _same(c_contiguous, _rounded_once(x.astype(wide) * others[0].astype(wide), numpy_dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unary_ops_keep_a_channels_last_input_in_its_order(on_the_host: None, dtype: str, rng: np.random.Generator) -> None:
    """The activations and the scalar ops on a channels-last input: a channels-last result holding what the
    C-contiguous input gives."""
    from algoswap import is_channels_last
    from algoswap_cuda import activation, arith

    x = rng.standard_normal((2, 8, 3, 4)).astype(_dtype(dtype)) * 4
    calls = {"hardswish": (activation.hardswish, {}), "hardsigmoid": (activation.hardsigmoid, {}), "relu": (activation.relu, {}),
             "silu": (activation.silu, {}), "gelu": (activation.gelu, {"approximate": "none"}),
             "hardtanh": (activation.hardtanh, {"min_val": -1.0, "max_val": 2.0}), "add_scalar": (arith.add_scalar, {"value": 3.0}),
             "mul_scalar": (arith.mul_scalar, {"value": 0.5}), "neg": (arith.neg, {})}
    for name, (function, attrs) in calls.items():
        got, expected = function(_nhwc(x), **attrs), function(x, **attrs)
        assert is_channels_last(got), name
        if not _same(got, expected):
            fail(f"{name} {dtype}: the channels-last result differs")
