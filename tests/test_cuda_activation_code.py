"""The C statements of the CUDA backend's activation kernels and convolution epilogue
(algoswap_cuda.activation.FORWARD / BACKWARD / FROM_OUTPUT, algoswap_cuda._epilogue.ACTIVATIONS), and the whole batch norm
kernel batchnorm2d_fused runs, compiled as host C++ (one thread: a grid of one block of one) and run
against the NumPy reference, NaN and infinities included: what the CUDA kernels compute,
checked without a GPU (the math functions they call, exp, erfc, expm1, log1p, tanh, fabs, treat NaN
and infinities alike in CUDA and in C). On a GPU the conformance suites run the kernels themselves;
tests/test_cuda_host_kernels.py runs the raw kernels built from these statements (float16 and bfloat16 too)
on the host.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algoswap import FUSED_ACTIVATIONS, ops
from helpers import fail
from algoswap.testing._nonfinite import classes

pytest.importorskip("cupy", reason="the CUDA backend's modules import CuPy")
activation = pytest.importorskip("algoswap_cuda.activation")
epilogue = pytest.importorskip("algoswap_cuda._epilogue")
COMPILER = shutil.which("c++") or shutil.which("g++")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no host C++ compiler")

TYPES = {"float": (np.float32, ctypes.c_float), "double": (np.float64, ctypes.c_double)}
# kernel -> (op, attributes) of the reference
KERNELS = {
    "hardtanh": ("hardtanh", {"min_val": -0.5, "max_val": 2.0}), "silu": ("silu", {}),
    "gelu": ("gelu", {"approximate": "none"}), "gelu_tanh": ("gelu", {"approximate": "tanh"}),
    "hardswish": ("hardswish", {}), "hardsigmoid": ("hardsigmoid", {}), "elu": ("elu", {"alpha": -1.5}),
    "mish": ("mish", {}), "relu": ("relu", {}), "sigmoid": ("sigmoid", {}), "tanh": ("tanh", {}),
    "leaky_relu": ("leaky_relu", {"negative_slope": -0.3}),
}
SCALARS = "lo, hi, alpha, slope"  # every activation's parameters (activation.PARAMS), in this order
# NaN, infinities, the kinks, and |x| <= 8, where every gradient is a normal float32 (smaller ones flush to 0)
SPECIAL = [np.nan, np.inf, -np.inf, -3.0, 3.0, -0.5, 2.0, 0.0, -0.0, 6.0, -6.0, 8.0, -8.0]


def _functions() -> str:
    lines = ["#include <cmath>", "using namespace std;"]
    assert {p for params in activation.PARAMS.values() for p in params} == set(SCALARS.split(", "))
    for t in TYPES:
        head = f"typedef {t} T; for (long i = 0; i < n; ++i) {{"
        scalars = ", ".join(f"{t} {p}" for p in SCALARS.split(", "))
        for name, code in activation.FORWARD.items():
            lines.append(f'extern "C" void forward_{name}_{t}(const {t}* xs, {t}* ys, long n, {scalars}) '
                         f"{{ {head} T v = xs[i]; {code} ys[i] = v; }} }}")
        for kind, table, operand in (("backward", activation.BACKWARD, "x"), ("from_output", activation.FROM_OUTPUT, "y")):
            for name, code in table.items():
                lines.append(f'extern "C" void {kind}_{name}_{t}(const {t}* dys, const {t}* xs, {t}* dxs, long n, {scalars}) '
                             f"{{ {head} const T dy = dys[i], {operand} = xs[i]; T dx; {code} dxs[i] = dx; }} }}")
        for name, code in epilogue.ACTIVATIONS.items():
            lines.append(f'extern "C" void epilogue_{name}_{t}({t}* ys, long n) {{ {head} T v = ys[i]; {code} ys[i] = v; }} }}')
    return "\n".join(lines)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = Path(tmp_path_factory.mktemp("cuda_code"))
    (folder / "code.cpp").write_text(_functions())
    subprocess.run([str(COMPILER), "-O1", "-shared", "-fPIC", "-o", str(folder / "code.so"), str(folder / "code.cpp")],
                   check=True, capture_output=True, timeout=300)
    return ctypes.CDLL(str(folder / "code.so"))


def _pointer(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


def _inputs(rng: np.random.Generator, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """x: the special values and wide normal draws within [-8, 8], each with grad_output 1, inf, NaN and a draw."""
    x = np.concatenate([SPECIAL, np.clip(3 * rng.standard_normal(200), -8, 8)])
    dy = np.concatenate([np.repeat([1.0, np.inf, np.nan], x.size), rng.standard_normal(x.size)])
    return np.tile(x, 4).astype(dtype), dy.astype(dtype)


def _same(got: np.ndarray, expected: np.ndarray, x: np.ndarray, what: str, eps: float) -> None:
    wrong = np.nonzero(classes(got) != classes(expected))[0]
    if len(wrong):
        fail(f"{what}: not as the reference at x = {[(float(x[i]), float(got[i]), float(expected[i])) for i in wrong[:5]]}")
    finite = np.isfinite(expected)
    error = np.linalg.norm(got[finite] - expected[finite]) / max(np.linalg.norm(expected[finite]), 1e-300)
    if error > 16 * eps:
        fail(f"{what}: relative error {error:.3g} > {16 * eps:.3g}")


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("type_name", list(TYPES))
def test_activation_kernels_compute_the_reference(library: Any, kernel: str, type_name: str, rng: np.random.Generator) -> None:
    dtype, scalar = TYPES[type_name]
    op, attrs = KERNELS[kernel]
    params = [scalar(attrs.get(name, 0.0)) for name in ("min_val", "max_val", "alpha", "negative_slope")]
    x, dy = _inputs(rng, dtype)
    eps = float(np.finfo(dtype).eps)
    out = np.empty_like(x)
    getattr(library, f"forward_{kernel}_{type_name}")(_pointer(x), _pointer(out), ctypes.c_long(x.size), *params)
    with np.errstate(all="ignore"):
        expected = ops.call(op, x.astype(np.float64), algorithm="numpy:direct", **attrs)
    _same(out, expected, x, f"{kernel} ({type_name})", eps)
    for kind, table in (("backward", activation.BACKWARD), ("from_output", activation.FROM_OUTPUT)):
        if kernel not in table:
            continue
        operand = x if kind == "backward" else out.copy()  # the gradient from the forward output: the output just computed
        grad = np.empty_like(x)
        getattr(library, f"{kind}_{kernel}_{type_name}")(_pointer(dy), _pointer(operand), _pointer(grad), ctypes.c_long(x.size), *params)
        with np.errstate(all="ignore"):
            expected = ops.call(f"{op}_grad", dy.astype(np.float64), operand.astype(np.float64), algorithm="numpy:direct", **attrs)
        _same(grad, expected, operand, f"{kernel}_grad ({type_name}, {kind})", eps)


@pytest.mark.parametrize("fused", list(FUSED_ACTIVATIONS))
def test_the_epilogue_applies_each_fused_activation(library: Any, fused: str, rng: np.random.Generator) -> None:
    op, attrs = FUSED_ACTIVATIONS[fused]
    for type_name, (dtype, _) in TYPES.items():
        x, _ = _inputs(rng, dtype)
        out = x.copy()
        getattr(library, f"epilogue_{fused}_{type_name}")(_pointer(out), ctypes.c_long(x.size))
        with np.errstate(all="ignore"):
            expected = ops.call(op, x.astype(np.float64), algorithm="numpy:direct", **attrs)
        _same(out, expected, x, f"epilogue {fused} ({type_name})", float(np.finfo(dtype).eps))


# Makes a CUDA kernel's source host C++ run by one thread: the grid-stride loop then visits every element.
_ONE_THREAD = "#include <cmath>\nusing namespace std;\n#define __global__\n#define __device__\n#define __forceinline__ inline\n" \
              "struct Dim { long long x; };\n" \
              "static const Dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};\n"


@pytest.mark.parametrize("fused", ["none", *FUSED_ACTIVATIONS])
def test_the_batchnorm_kernel_is_the_reference_batchnorm2d_fused(fused: str, tmp_path: Path, rng: np.random.Generator) -> None:
    """The batch norm kernel (algoswap_cuda._passes) with each activation before its store, what
    algoswap_cuda.norm.batchnorm2d_fused launches, gives the reference's batchnorm2d_fused."""
    passes = pytest.importorskip("algoswap_cuda._passes")
    code, name = passes.batchnorm_source("float64", True, True, fused)
    (tmp_path / "bn.cpp").write_text(_ONE_THREAD + code)
    subprocess.run([str(COMPILER), "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "bn.so"), str(tmp_path / "bn.cpp")],
                   check=True, capture_output=True, timeout=300)
    kernel = getattr(ctypes.CDLL(str(tmp_path / "bn.so")), name)
    x = rng.standard_normal((2, 3, 4, 5)) * 4
    x.flat[:len(SPECIAL)] = SPECIAL
    mean, weight, bias = (rng.standard_normal(3) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 3)
    y = np.empty_like(x)
    kernel(_pointer(x), _pointer(mean), _pointer(var), _pointer(weight), _pointer(bias), _pointer(y),
           ctypes.c_longlong(x.size), ctypes.c_longlong(20), ctypes.c_int(3), ctypes.c_double(1e-5))
    with np.errstate(all="ignore"):
        expected = ops.call("batchnorm2d_fused", x, mean, var, weight, bias, eps=1e-5, activation=fused, algorithm="numpy:direct")
    _same(y.ravel(), expected.ravel(), x.ravel(), f"batchnorm2d_fused kernel, {fused}", float(np.finfo(np.float64).eps))
