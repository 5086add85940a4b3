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
from helpers import derived_seed, fail

pytest.importorskip("cupy", reason="the CUDA backend's modules import CuPy")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no host C++ compiler")

HALF = ("float16", "bfloat16")
FLOATS = ("float16", "bfloat16", "float32", "float64")
# the modules whose functions run here (imported before CuPy is replaced in them)
MODULES = ("_types", "_runtime", "_kernels", "_passes", "activation", "pool", "resample", "norm", "softmax", "reduce")
_RAW_IN_EVERY_DTYPE = ("batchnorm2d", "batchnorm2d_fused", "layer_norm", "softmax")
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
