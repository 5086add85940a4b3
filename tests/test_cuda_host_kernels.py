"""The CUDA backend's raw kernels and their Python callers, run on the host (tests/cuda_host.py: host C++ for
each kernel, NumPy in CuPy's place): the conformance kit's value and non-finite checks of the implementations
that need nothing of CuPy but arrays and raw kernels, in float16 and bfloat16 (every kernel reads and writes
the half types as they are and computes in float32 between) and, for the kernels shared with them, float32
and float64. What a GPU adds (NVRTC, the CUDA math library, the launch itself) the conformance suites check
on the GPU (benchmarks/cuda_device_run.sh); tests/test_cuda_half.py runs there too.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import FAMILIES
from algoswap.testing._conformance import check_conformance
from algoswap.testing._nonfinite_check import check_nonfinite, reference_oracle
from cuda_host import COMPILER, compile_source, every_kernel_source, fake_cupy
from helpers import assert_op_close, derived_seed, fail

pytest.importorskip("cupy", reason="the CUDA backend's modules import CuPy")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no host C++ compiler")

HALF = ("float16", "bfloat16")
FLOATS = ("float16", "bfloat16", "float32", "float64")
# the modules whose functions run here (imported before CuPy is replaced in them)
MODULES = ("_types", "_runtime", "_transpose", "_kernels", "_vectorised", "_passes", "activation", "pool", "resample", "norm",
           "softmax", "reduce", "_order", "elementwise")
_RAW_IN_EVERY_DTYPE = ("batchnorm2d", "batchnorm2d_fused", "layer_norm", "softmax", "add")
# op -> the dtypes it is checked in here: raw kernels in every float dtype; the activations' raw kernels
# (float16 and bfloat16 only: float32 and float64 run CuPy element-wise kernels); the CuPy expressions
# run in float32 for the half types (_types.in_float32, reduce.total) in the half types
CHECKED = {
    **{op: FLOATS for op in FAMILIES["pool"] + FAMILIES["resample"] + _RAW_IN_EVERY_DTYPE},
    **{op: HALF for op in FAMILIES["activation"] + FAMILIES["norm"] + FAMILIES["softmax"] + FAMILIES["reduce"]
       if op not in _RAW_IN_EVERY_DTYPE},
}
PARAMS = [(op, dtype) for op, dtypes in CHECKED.items() for dtype in dtypes]


@pytest.fixture
def on_the_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in MODULES:
        importlib.import_module(f"algoswap_cuda.{name}")
    yield from fake_cupy(monkeypatch)


def _impl(op: str) -> Any:
    impl = algoswap.registry().impls[(op, "direct", "cuda")]
    assert set(CHECKED[op]) <= impl.dtypes, (op, impl.dtypes)
    return impl


def test_the_harness_rounds_as_numpy_and_ml_dtypes(rng: np.random.Generator) -> None:
    """The host's __half and __nv_bfloat16 casts (the kernels' (T)x[i] and (S)v) are numpy's
    float16 and ml_dtypes' bfloat16: every 16-bit pattern to float, and floats (random bit patterns, ties,
    the edges of the ranges and of the subnormals) to nearest, ties to even."""
    import ctypes

    library = compile_source("")
    patterns = np.arange(2**16, dtype=np.uint16)
    edges = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-26,
                      1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.4e38, np.inf, -np.inf, np.nan], np.float32)
    floats = np.concatenate([edges, rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                             (rng.standard_normal(50_000) * 10.0 ** rng.integers(-9, 6, 50_000)).astype(np.float32)])
    for name, dtype in (("half", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        wide = np.empty(patterns.size, np.float32)
        getattr(library, f"{name}_to_float")(patterns.ctypes.data_as(ctypes.c_void_p), wide.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_long(patterns.size))
        expected = patterns.view(dtype).astype(np.float32)
        if not np.array_equal(wide, expected, equal_nan=True):
            fail(f"{name} to float differs at patterns {np.flatnonzero(~((wide == expected) | np.isnan(expected)))[:5]}")
        bits = np.empty(floats.size, np.uint16)
        getattr(library, f"float_to_{name}")(floats.ctypes.data_as(ctypes.c_void_p), bits.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_long(floats.size))
        with np.errstate(over="ignore", invalid="ignore"):
            expected = floats.astype(dtype)
        got = bits.view(dtype)
        same = (got.astype(np.float32) == expected.astype(np.float32)) | (np.isnan(got.astype(np.float32)) & np.isnan(floats))
        same &= (np.signbit(got.astype(np.float32)) == np.signbit(expected.astype(np.float32))) | np.isnan(floats)
        if not same.all():
            wrong = np.flatnonzero(~same)[:5]
            fail(f"float to {name}: {floats[wrong]} gave {got[wrong]}, expected {expected[wrong]}")


@pytest.mark.parametrize("op, dtype", PARAMS)
def test_values_conform_on_the_host(on_the_host: None, op: str, dtype: str, rng: np.random.Generator) -> None:
    ran, failures = check_conformance(_impl(op), dtype, rng)
    assert ran, f"cuda:direct runs none of the cases of {op} in {dtype}"
    if failures:
        fail(f"{op} cuda:direct ({dtype}) on the host:\n" + "\n".join(failures))


@pytest.mark.parametrize("op, dtype", PARAMS)
def test_nonfinite_inputs_conform_on_the_host(on_the_host: None, op: str, dtype: str) -> None:
    ran, failures = check_nonfinite(_impl(op), dtype, derived_seed(), reference_oracle)
    if failures:
        fail(f"{op} cuda:direct ({dtype}) on the host, NaN and infinities:\n" + "\n".join(failures))


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="no nvcc here (the CUDA toolkit compiles for the GPU without one)")
@pytest.mark.parametrize("dtype", HALF)
def test_every_kernel_compiles_for_the_h200(dtype: str, tmp_path: Path) -> None:
    """Every raw kernel source for ``dtype`` (cuda_host.every_kernel_source), compiled for sm_90 by nvcc with
    warnings as errors: what NVRTC compiles on the GPU machine (the headers and built-ins are the toolkit's)."""
    sources = every_kernel_source(dtype)
    unit = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + "".join(
        f"namespace unit{i} {{\n{source}\n}}\n" for i, source in enumerate(sources))
    (tmp_path / "kernels.cu").write_text(unit)
    done = subprocess.run([str(NVCC), "-arch=sm_90", "-cubin", "-Werror", "all-warnings", "-o", str(tmp_path / "kernels.cubin"),
                           str(tmp_path / "kernels.cu")], capture_output=True, text=True, timeout=600)
    if done.returncode:
        fail(f"{len(sources)} kernel sources for {dtype} do not compile for sm_90:\n{done.stderr[:6000]}")


@pytest.fixture
def exact_on_the_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in (*MODULES, "_epilogue", "_exact"):
        importlib.import_module(f"algoswap_cuda.{name}")
    yield from fake_cupy(monkeypatch)


def test_float16_convolutions_are_made_exact_where_an_operand_is_not_finite(exact_on_the_host: None, rng: np.random.Generator) -> None:
    """_exact.repair (cuDNN's float16 engines lose infinities): on finite operands the output is left as the
    engine wrote it; with an infinity in the input (or the bias) every output is the call's exact result,
    NaN and infinity where torch has them, the rest within float16's bound."""
    from algoswap_cuda import _exact

    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float16)
    w, b = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16), rng.standard_normal(4).astype(np.float16)
    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)  # NCHW here (the host harness takes C-contiguous arrays); NHWC: on the GPU
    engine = np.full((2, 4, 6, 6), 7.0, np.float16)  # what "the engine" wrote
    _exact.repair(x, w, engine, True, *attrs, bias=b, activation="relu")
    assert (engine == 7.0).all(), "finite operands: the output must be left alone"
    x[0, 1, 2, 2], b[3] = np.inf, -np.inf
    _exact.repair(x, w, engine, True, *attrs, bias=b, activation="relu")
    ref = algoswap.ops.call("conv2d", x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), algorithm="numpy:default",
                            padding=1)
    ref = np.where(np.isnan(ref) | (ref > 0), ref, 0.0)
    got = engine.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
    finite = np.isfinite(ref)
    assert np.allclose(got[finite], ref[finite], rtol=2e-3, atol=2e-3 * np.abs(ref[finite]).max())



def test_a_convolution_output_flag_is_read_by_the_next_convolution(exact_on_the_host: None, rng: np.random.Generator,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """_exact's remembered flags: the kernel after a float16 convolution flags the output it leaves (an overflow to
    infinity is flagged, finite values are not); the next convolution reads that flag instead of scanning its input,
    and is made exact through it; the flag belongs to that array object only, and goes with it."""
    import gc

    from algoswap_cuda import _exact

    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float16)
    w1, w2 = ((rng.standard_normal(shape) * 0.3).astype(np.float16) for shape in ((4, 3, 3, 3), (5, 4, 3, 3)))
    y1 = np.full((2, 4, 6, 6), 7.0, np.float16)
    _exact.repair(x, w1, y1, True, *attrs, remember=True)
    assert _exact.recorded(y1) is not None and not _exact.recorded(y1).any(), "finite output: its flag stays down"
    assert _exact.recorded(y1.copy()) is None and _exact.recorded(y1[:1]) is None, "a flag is its array's alone"
    y1[1, 2, 3, 4] = np.inf  # what an engine leaves where a sum overflows float16
    _exact.repair(x, w1, y1, True, *attrs, remember=True)
    assert (y1 != 7.0).sum() == 1 and _exact.recorded(y1).any(), "finite operands: y1 kept as written, its inf flagged"
    scans = []
    monkeypatch.setattr(_exact, "flag_nonfinite", lambda arrays: scans.append(arrays) or np.zeros(_exact.SLOTS, np.int32))
    y2 = np.full((2, 5, 6, 6), 7.0, np.float16)
    _exact.repair(y1, w2, y2, False, *attrs, known=(_exact.recorded(y1), None), remember=True)
    assert not scans, "the input's flag was remembered: nothing is scanned"
    ref = algoswap.ops.call("conv2d", y1.astype(np.float64), w2.astype(np.float64), None, algorithm="numpy:default", padding=1)
    got = y2.astype(np.float64)
    assert np.isinf(ref).any() and np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
    assert _exact.recorded(y2).any(), "recomputed from a non-finite input: the output's flag is raised"
    remembered = len(_exact._flags)
    del y1
    gc.collect()
    assert len(_exact._flags) == remembered - 1, "a dead array's flag is forgotten"

def _probe_plan(loss: str, epilogue: Any = None) -> Any:
    """A stand-in for a cuDNN float16 forward plan (NCHW, 3x3, padding 1): the float64 convolution (+ bias +
    residual, relu), rounded once, then ``loss``: "none", "zero" (an infinity written as 0, as cuDNN's engine for 3
    channels does), "saturate" (as +-65504), "last image" (zero, in the last image only), "bias" (the bias's
    infinities dropped), "beside NaN" (a -inf written as 0 where the other channel of its pair is NaN, as a fused
    float16 graph for 3 channels did with a bias of -inf beside one of NaN), "edge" (one overflowing output written as
    65504: two sums rounding differently)."""
    from types import SimpleNamespace

    g = SimpleNamespace(kind="fprop", x=(3, 8, 12, 12), w=(16, 8, 3, 3), y=(3, 16, 12, 12), stride=(1, 1), pre=(1, 1),
                        post=(1, 1), dilation=(1, 1), dtype="float16", channels_last=False, epilogue=epilogue)

    def run(x: np.ndarray, w: np.ndarray, y: np.ndarray, *extra: np.ndarray) -> None:
        bias = extra[0] if epilogue is not None and epilogue.bias else None
        residual = extra[-1] if epilogue is not None and epilogue.residual else None
        if loss == "bias" and bias is not None:
            bias = np.where(np.isinf(bias), 0, bias)
        with np.errstate(all="ignore"):
            v = np.asarray(algoswap.ops.call("conv2d", x.astype(np.float64), w.astype(np.float64), None,
                                             algorithm="numpy:default", padding=1))
            v = v + (0 if bias is None else bias.astype(np.float64)[:, None, None]) + (0 if residual is None else residual)
            v = np.where(np.isnan(v) | (v > 0), v, 0.0) if epilogue is not None and epilogue.activation == "relu" else v
            out = v.astype(np.float16)
        infinite = np.isinf(out)
        if loss in ("zero", "last image"):
            out[infinite & (np.arange(3)[:, None, None, None] == 2 if loss == "last image" else infinite)] = 0
        elif loss == "saturate":
            out = np.clip(out, -65504, 65504)
        elif loss == "beside NaN":
            paired = out[:, np.arange(out.shape[1]) ^ 1]
            out[(out == -np.inf) & np.isnan(paired)] = 0
        elif loss == "edge" and infinite.any() and np.isfinite(x).all():  # an overflow only
            out[tuple(np.argwhere(infinite)[0])] = np.copysign(65504, out[infinite][0])
        y[...] = out

    return SimpleNamespace(geometry=g, run=run)


@pytest.mark.parametrize("loss, keeps", [("none", True), ("edge", True), ("zero", False), ("saturate", False),
                                         ("last image", False), ("bias", False),
                                         ("beside NaN", False)])
def test_the_float16_plan_probe_finds_every_kind_of_lost_infinity(exact_on_the_host: None, loss: str, keeps: bool) -> None:
    """_exact.keeps_infinities against stand-in plans that lose infinities the ways cuDNN's engines did (0 for an
    infinity, in any image; a fused graph dropping the bias's) or might (saturation), and two that keep them
    (exactly, and with one output at the range's edge rounded the other way)."""
    from types import SimpleNamespace

    from algoswap_cuda import _exact

    epilogue = {"bias": SimpleNamespace(bias=True, residual=True, activation="relu"),
                "beside NaN": SimpleNamespace(bias=True, residual=False, activation="none")}.get(loss)
    assert _exact.keeps_infinities(_probe_plan(loss, epilogue)) is keeps
    if loss == "none":
        assert _exact.keeps_infinities(_probe_plan("none", SimpleNamespace(bias=True, residual=True, activation="relu")))


def _aligned(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, offset: int = 0) -> np.ndarray:
    """Standard normal values of ``dtype`` whose data starts ``offset`` bytes past a 16-byte boundary."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(size + 32, np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    array = raw[start:start + size].view(dtype).reshape(shape)
    array[...] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return array


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_softmax_and_add_read_16_bytes_at_a_time_where_the_rows_allow(on_the_host: None, dtype: str,
                                                                           rng: np.random.Generator) -> None:
    """_vectorised: a row of ViT's 768 values starting 16-byte aligned is read 16 bytes per load (8 half values),
    by the layer norm, the softmax and the add;
    one of 197 values (or a start off the boundary) one value per load; both as the reference, within the format's
    bound; more rows than a block has warps (the harness runs each row's lane alone)."""
    from algoswap_cuda import _vectorised

    numpy_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    for d, offset, width in ((768, 0, 16 // numpy_dtype.itemsize), (197, 0, 1), (768, numpy_dtype.itemsize, 1)):
        x = _aligned(rng, (9, d), numpy_dtype, offset)
        other = _aligned(rng, (9, d), numpy_dtype, offset)
        w, b = (rng.standard_normal(d).astype(np.float32).astype(numpy_dtype) for _ in range(2))
        assert _vectorised.width(numpy_dtype, x, other, length=d) == width
        wide = [a.astype(np.float64) for a in (x, w, b)]
        got = _vectorised.layer_norm(x, w, b, d, 1e-5)
        ref = algoswap.ops.call("layer_norm", *wide, algorithm="numpy:default", normalized_ndim=1, eps=1e-5)
        assert_op_close("layer_norm", got, ref, wide, {"normalized_ndim": 1, "eps": 1e-5}, dtype=numpy_dtype)
        for safe in (False, True):
            got = _vectorised.softmax_rows(x, d, 0.5, safe)
            ref = algoswap.ops.call("softmax", wide[0] * 0.5, algorithm="numpy:default", axis=-1)
            assert_op_close("softmax", got, ref, [wide[0] * 0.5], {"axis": -1}, dtype=numpy_dtype)
        total = _vectorised.add(x, other)
        assert total.dtype == numpy_dtype
        wider = np.float64 if dtype == "float64" else np.float32  # T: what the kernel adds in
        assert np.array_equal(total, (x.astype(wider) + other.astype(wider)).astype(numpy_dtype))


@pytest.mark.parametrize("dtype", HALF)
def test_half_activations_read_16_bytes_at_a_time_as_they_read_one_value(on_the_host: None, dtype: str,
                                                                      rng: np.random.Generator) -> None:
    """activation's raw kernels: an array of 8k values starting 16-byte aligned is read 8 values per load; its
    values bit for bit as one value per load (a start off the boundary; NaN as NaN), forward and gradients, NaN and
    infinities among the values."""
    from algoswap_cuda import activation

    numpy_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    values = np.concatenate([rng.standard_normal(1019) * 4, [np.nan, np.inf, -np.inf, -12.0, 0.0]]).astype(np.float32)
    rng.shuffle(values)
    whole, shifted = _aligned(rng, (1024,), numpy_dtype, 0), _aligned(rng, (1024,), numpy_dtype, numpy_dtype.itemsize)
    whole[...] = shifted[...] = values.astype(numpy_dtype)
    grad = (rng.standard_normal(1024) * 2).astype(numpy_dtype)
    for kind, table in (("forward", activation.FORWARD), ("backward", activation.BACKWARD), ("from_output", activation.FROM_OUTPUT)):
        for name in table:
            params = tuple(0.5 + k for k in range(len(activation.PARAMS.get(name, ()))))
            packed, single = ((a,) if kind == "forward" else (grad, a) for a in (whole, shifted))
            assert activation.width(numpy_dtype, *packed, length=1024) == 8 and activation.width(numpy_dtype, *single, length=1024) == 1
            got, expected = (activation._half(kind, name, arrays, params) for arrays in (packed, single))
            same = (got.view(np.uint16) == expected.view(np.uint16)) | (np.isnan(got.astype(np.float32)) & np.isnan(expected.astype(np.float32)))
            if not same.all():  # (a NaN's sign and payload are the host compiler's choice)
                wrong = np.flatnonzero(~same)[:5]
                fail(f"{name} {kind} {dtype}: 16-byte loads differ from single loads at {wrong}")


def test_fused_attention_geometry_reads_strides_and_writes_the_output_in_q_order() -> None:
    """_sdpa.geometry (what cuDNN's attention graph is built for): a head split's (B, H, L, E) view of (B, L, H, E)
    memory is read with its strides and its output laid out the same way (merging the heads back is then a view);
    3-D inputs are one head; what cuDNN's attention does not take is said, not guessed."""
    from algoswap_cuda import _sdpa

    split = (197 * 12 * 64, 64, 12 * 64, 1)  # elements
    g = _sdpa.geometry("bfloat16", ((2, 12, 197, 64),) * 3, (split,) * 3, False, 0.125)
    assert not isinstance(g, str) and g.strides == (split,) * 4 and g.out == (2, 12, 197, 64)
    g = _sdpa.geometry("float16", ((2, 12, 197, 64), (2, 12, 50, 64), (2, 12, 50, 32)), None, True, 0.125)
    assert not isinstance(g, str) and g.strides[3] == (12 * 197 * 32, 197 * 32, 32, 1) and g.out == (2, 12, 197, 32)
    g = _sdpa.geometry("bfloat16", ((3, 20, 64),) * 3, None, False, 0.125)
    assert not isinstance(g, str) and g.q == (3, 1, 20, 64) and g.strides[0] == (20 * 64, 20 * 64, 64, 1)
    assert "float32" in _sdpa.geometry("float32", ((2, 3, 4, 8),) * 3, None, False, 1.0)
    assert "rank 5" in _sdpa.geometry("bfloat16", ((2, 2, 3, 4, 8),) * 3, None, False, 1.0)
    assert "batch dimensions" in _sdpa.geometry("bfloat16", ((2, 3, 4, 8), (1, 3, 4, 8), (1, 3, 4, 8)), None, False, 1.0)
    assert "multiple of 8 (16 bytes)" in _sdpa.geometry("bfloat16", ((2, 3, 4, 6),) * 3, None, False, 1.0)  # rows of 12 bytes


@pytest.mark.parametrize("dtype", HALF)
def test_warp_softmax_gives_a_row_of_minus_infinity_zeros_only_when_safe(on_the_host: None, dtype: str) -> None:
    """Attention's rule (torch's _safe_softmax) for a row whose every score is -inf, and NaN spreading over its row,
    through the warp-per-row kernel: 16-byte loads (rows of 16) and one value per load (rows of 5)."""
    from algoswap_cuda import _vectorised

    numpy_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    for d in (16, 5):
        x = np.zeros((3, d), numpy_dtype)
        x[0], x[1, 2] = -np.inf, np.nan
        for safe, first in ((True, 0.0), (False, np.nan)):
            got = _vectorised.softmax_rows(x, d, 1.0, safe).astype(np.float64)
            assert np.array_equal(got[0], np.full(d, first), equal_nan=True) and np.isnan(got[1]).all(), (d, safe, got)
            assert np.allclose(got[2], 1 / d, rtol=2.0**-7)  # rounded once to the half type


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_padding_nan_pass_reads_a_channels_last_weight_in_place(monkeypatch: pytest.MonkeyPatch, dtype: str,
                                                                    rng: np.random.Generator) -> None:
    """conv._padding_nan_forward: NaN where a zero-padding tap meets a non-finite weight, the same whether the
    weight is KCRS or KRSC in memory (a channels-last torch model's weight crosses as it lies: no copy per call)."""
    importlib.import_module("algoswap_cuda.conv")
    for name in MODULES:
        importlib.import_module(f"algoswap_cuda.{name}")
    from algoswap_cuda import _runtime, conv

    copies: list[tuple[int, ...]] = []
    real = _runtime.contiguous
    monkeypatch.setattr(_runtime, "contiguous", lambda a: copies.append(a.shape) if not a.flags.c_contiguous else None or real(a))
    for _ in fake_cupy(monkeypatch):
        w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
        w[1, 2, 0, 1], w[3, 0, 2, 2] = np.inf, np.nan
        krsc = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        assert algoswap.is_channels_last(krsc)
        x = np.zeros((2, 3, 5, 5), dtype)
        outputs = []
        for weight in (w, krsc):
            y = np.zeros((2, 4, 5, 5), dtype)
            conv._padding_nan_forward(x, weight, y, (1, 1), ((1, 1), (1, 1)), (1, 1))
            outputs.append(np.isnan(y))
        assert outputs[0].any() and not outputs[0].all()
        assert np.array_equal(outputs[0], outputs[1])
        assert outputs[0][:, 1, 0, :].all() and not outputs[0][:, 0].any(), "channel 1's top row reads the padding at tap (0, 1)"
        assert not copies, "the KRSC weight was copied"
