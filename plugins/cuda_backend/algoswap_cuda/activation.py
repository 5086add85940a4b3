"""Element-wise activations and their gradients (CuPy element-wise kernels; for float16 and bfloat16 one raw
kernel each, reading and writing the half-precision arrays 16 bytes at a time where they allow it, and computing in
float32 between).

The conditions are written so that NaN goes where PyTorch sends it (ternaries, never fmin/fmax,
which drop NaN); ``FORWARD`` holds each activation as C statements on ``T v``, shared with the
convolution epilogue (_epilogue), which fuses some of them. ``T`` there is the type the statements
compute in (float for the half precisions: ``_types.prelude``), whatever the arrays store (``S``). The forward
activations keep a channels-last input's memory order (``_order.keeps_order``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy as cp
import numpy as np

from ._order import keeps_order
from ._runtime import contiguous, dtype_name
from ._types import is_half, prelude, scalar
from ._vectorised import PACK, THREADS, stride_blocks, width

SQRT_HALF = "(T)0.70710678118654752"  # 1 / sqrt(2)
INV_SQRT_2PI = "(T)0.39894228040143268"  # 1 / sqrt(2 pi)
TANH_SCALE = "(T)0.79788456080286536"  # sqrt(2 / pi), in the tanh approximation of gelu


def _sigmoid(of: str, into: str = "s") -> str:
    """T s = sigmoid(of), from exp(-|of|) so that it neither overflows nor flushes to 0 before its value does."""
    return f"T {into}_e = exp(-fabs({of})); T {into} = ({of} >= (T)0 ? (T)1 : {into}_e) / ((T)1 + {into}_e);"


def _softplus(of: str) -> str:
    """T sp = log(1 + exp(of)), as max(of, 0) + log1p(exp(-|of|)): no overflow, NaN stays NaN."""
    return f"T sp = log1p(exp(-fabs({of}))) + ({of} > (T)0 ? {of} : (T)0);"


def _tanh_gate(of: str) -> str:
    """T s = (1 + tanh(u)) / 2 = sigmoid(2u), u = sqrt(2/pi) (of + 0.044715 of^3): gelu's tanh form."""
    return f"T u2 = 2 * {TANH_SCALE} * ({of} + (T)0.044715 * {of} * {of} * {of}); {_sigmoid('u2')}"


# gelu's slope below x = -10, in double: tiny and negative (an infinite dy gives -inf, not inf * 0 = NaN)
_GELU_TAIL = ("const double xd = x, g = 0.5 * erfc(-xd * 0.70710678118654752) + xd * exp(-0.5 * xd * xd) * 0.39894228040143268; "
              "dx = (T)((double)dy * g);")
_CLAMP_3_6 = "T c = v + 3; c = c < (T)0 ? (T)0 : (c > (T)6 ? (T)6 : c);"  # hardtanh(v + 3, 0, 6)
# activation -> C statements turning T v into activation(v) (hardtanh reads the bounds T lo, T hi)
FORWARD = {
    "relu": "if (!(v > (T)0) && v == v) v = (T)0;",
    "hardtanh": "v = v < lo ? lo : (v > hi ? hi : v);",
    "silu": f"{{ {_sigmoid('v')} v = v * s; }}",
    "gelu": f"v = (T)0.5 * v * erfc(-v * {SQRT_HALF});",
    "gelu_tanh": f"{{ {_tanh_gate('v')} v = v * s; }}",
    "hardswish": f"{{ {_CLAMP_3_6} v = v * c / 6; }}",
    "hardsigmoid": f"{{ {_CLAMP_3_6} v = c / 6; }}",
    "elu": "v = v > (T)0 ? v : alpha * expm1(v);",
    "mish": f"{{ {_softplus('v')} v = v * tanh(sp); }}",
    "sigmoid": f"{{ {_sigmoid('v')} v = s; }}",
    "tanh": "v = tanh(v);",
    "leaky_relu": "v = v > (T)0 ? v : v * slope;",
}
# activation -> C statements setting T dx from T dy and the forward input T x
BACKWARD = {
    "hardtanh": "dx = (x > lo && x < hi) ? dy : (T)0;",
    "silu": f"{_sigmoid('x')} dx = dy * s * ((T)1 + x * ((T)1 - s));",
    "gelu": (f"if (x < (T)-10) {{ {_GELU_TAIL} }} "  # float's exp(-x * x / 2) reaches 0 near x = -14, where the slope is not
             f"else dx = dy * ((T)0.5 * erfc(-x * {SQRT_HALF}) + x * exp((T)-0.5 * x * x) * {INV_SQRT_2PI});"),
    "gelu_tanh": f"{_tanh_gate('x')} dx = dy * (s + 2 * x * s * ((T)1 - s) * {TANH_SCALE} * ((T)1 + (T)0.134145 * x * x));",
    "hardswish": "dx = x <= (T)-3 ? (T)0 : (x >= (T)3 ? dy : dy * (x / 3 + (T)0.5));",
    "hardsigmoid": "dx = (x > (T)-3 && x < (T)3) ? dy / 6 : (T)0;",
    "elu": "dx = x > (T)0 ? dy : dy * alpha * exp(x);",
    "mish": f"{_softplus('x')} T t = tanh(sp); {_sigmoid('x')} dx = dy * (t + x * s * ((T)1 - t * t));",
    "relu": "dx = x <= (T)0 ? (T)0 : dy;",  # 0 where x <= 0, else dy (where x is NaN too, as in PyTorch)
    "leaky_relu": "dx = x > (T)0 ? dy : dy * slope;",
}
# activation -> C statements setting T dx from T dy and the forward output T y (sigmoid's and tanh's gradients)
FROM_OUTPUT = {"sigmoid": "dx = dy * y * ((T)1 - y);", "tanh": "dx = dy * ((T)1 - y * y);"}
# activation -> its scalar parameters (kernel arguments after the arrays)
PARAMS = {"hardtanh": ("lo", "hi"), "elu": ("alpha",), "leaky_relu": ("slope",)}
# the activations whose float32 and float64 kernels are CuPy element-wise kernels of these statements
_ELEMENTWISE = ("hardtanh", "silu", "gelu", "gelu_tanh", "hardswish", "hardsigmoid", "elu", "mish")

# The raw kernels of float16 and bfloat16 (any float dtype compiles): a grid-stride loop over packs of VEC values, one
# 16-byte access each where the arrays allow it, else VEC = 1 (_vectorised.width: n is then a multiple of VEC); each
# value read as the stored type S, run through the statements in T (float), stored as S again.
_HALF = {
    "forward": PACK + """extern "C" __global__ void {name}(const S* xs, S* ys, long long n{params}) {{
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    const long long packs = n / {vec};
    for (long long i = first; i < packs; i += step) {{
        const Pack p = ((const Pack*)xs)[i];
        Pack o;
        for (int e = 0; e < {vec}; ++e) {{ T v = (T)p.v[e]; {code} o.v[e] = (S)v; }}
        ((Pack*)ys)[i] = o;
    }}
}}
""",
    "gradient": PACK + """extern "C" __global__ void {name}(const S* dys, const S* operands, S* dxs, long long n{params}) {{
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    const long long packs = n / {vec};
    for (long long i = first; i < packs; i += step) {{
        const Pack a = ((const Pack*)dys)[i], b = ((const Pack*)operands)[i];
        Pack o;
        for (int e = 0; e < {vec}; ++e) {{ const T dy = (T)a.v[e], {operand} = (T)b.v[e]; T dx; {code} o.v[e] = (S)dx; }}
        ((Pack*)dxs)[i] = o;
    }}
}}
""",
}


def kernel_source(kind: str, name: str, dtype: str, vec: int = 1) -> tuple[str, str]:
    """The raw kernel of activation ``name`` for ``dtype`` and ``vec`` values per load, and its name: ``kind``
    "forward" (FORWARD), "backward" (BACKWARD, from the input x) or "from_output" (FROM_OUTPUT, from the output y)."""
    code = {"forward": FORWARD, "backward": BACKWARD, "from_output": FROM_OUTPUT}[kind][name]
    params = PARAMS.get(name, ())
    kernel = f"algoswap_{name}_{kind}_{dtype}_v{vec}"
    source = _HALF["forward" if kind == "forward" else "gradient"].format(
        name=kernel, code=code, vec=vec, operand="y" if kind == "from_output" else "x",
        params="".join(f", T {p}" for p in params))
    return prelude(dtype) + source, kernel


@lru_cache(maxsize=256)  # every (kind, activation, dtype, values per load)
def _raw_kernel(kind: str, name: str, dtype: str, vec: int) -> Any:
    return cp.RawKernel(*kernel_source(kind, name, dtype, vec))


def _half(kind: str, name: str, arrays: tuple[Any, ...], params: tuple[float, ...]) -> Any:
    """The raw kernel's result on ``arrays`` (contiguous copies where they are not), as a new array."""
    arrays = tuple(contiguous(a) for a in arrays)
    first = arrays[0]
    out = cp.empty(first.shape, first.dtype)
    if first.size:
        vec = width(first.dtype, *arrays, out, length=first.size)
        _raw_kernel(kind, name, dtype_name(first.dtype), vec)((stride_blocks(first.size // vec),), (THREADS,),
                                                             (*arrays, out, np.int64(first.size), *(scalar(first.dtype, p) for p in params)))
    return out


def _forward_kernel(name: str) -> Any:
    params = "".join(f", T {p}" for p in PARAMS.get(name, ()))
    return cp.ElementwiseKernel(f"T x{params}", "T y", f"T v = x; {FORWARD[name]} y = v;", f"algoswap_{name}")


def _backward_kernel(name: str) -> Any:
    params = "".join(f", T {p}" for p in PARAMS.get(name, ()))
    return cp.ElementwiseKernel(f"T dy, T x{params}", "T dx", BACKWARD[name], f"algoswap_{name}_grad")


_relu_grad = cp.ElementwiseKernel("T dy, T x", "T dx", "dx = x <= 0 ? (T)0 : dy", "algoswap_relu_grad")
_leaky = cp.ElementwiseKernel("T x, T slope", "T y", "y = x > 0 ? x : x * slope", "algoswap_leaky_relu")
_leaky_grad = cp.ElementwiseKernel("T dy, T x, T slope", "T dx", "dx = x > 0 ? dy : dy * slope", "algoswap_leaky_relu_grad")
_FORWARD = {name: _forward_kernel(name) for name in _ELEMENTWISE}
_BACKWARD = {name: _backward_kernel(name) for name in _ELEMENTWISE}


def _forward(name: str, x: Any, *params: float) -> Any:
    """Activation ``name`` of x: its CuPy element-wise kernel, or for the half types its raw kernel."""
    if is_half(x):
        return _half("forward", name, (x,), params)
    return _FORWARD[name](x, *(x.dtype.type(p) for p in params))


def _backward(name: str, dy: Any, x: Any, *params: float) -> Any:
    """The gradient of activation ``name`` from its input x: its CuPy element-wise kernel, or its raw kernel."""
    if is_half(dy):
        return _half("backward", name, (dy, x), params)
    return _BACKWARD[name](dy, x, *(x.dtype.type(p) for p in params))


@keeps_order
def relu(x: Any) -> Any:
    return _half("forward", "relu", (x,), ()) if is_half(x) else cp.maximum(x, 0)


def relu_grad(dy: Any, x: Any) -> Any:
    """0 where x <= 0, else dy (where x is NaN too, as in PyTorch)."""
    return _half("backward", "relu", (dy, x), ()) if is_half(dy) else _relu_grad(dy, x)


@keeps_order
def sigmoid(x: Any) -> Any:
    return _half("forward", "sigmoid", (x,), ()) if is_half(x) else 1 / (1 + cp.exp(-x))


def sigmoid_grad(dy: Any, y: Any) -> Any:
    return _half("from_output", "sigmoid", (dy, y), ()) if is_half(dy) else dy * y * (1 - y)


@keeps_order
def tanh(x: Any) -> Any:
    return _half("forward", "tanh", (x,), ()) if is_half(x) else cp.tanh(x)


def tanh_grad(dy: Any, y: Any) -> Any:
    return _half("from_output", "tanh", (dy, y), ()) if is_half(dy) else dy * (1 - y * y)


@keeps_order
def leaky_relu(x: Any, *, negative_slope: float) -> Any:
    if is_half(x):
        return _half("forward", "leaky_relu", (x,), (negative_slope,))
    return _leaky(x, x.dtype.type(negative_slope))


def leaky_relu_grad(dy: Any, x: Any, *, negative_slope: float) -> Any:
    if is_half(dy):
        return _half("backward", "leaky_relu", (dy, x), (negative_slope,))
    return _leaky_grad(dy, x, x.dtype.type(negative_slope))


@keeps_order
def hardtanh(x: Any, *, min_val: float, max_val: float) -> Any:
    return _forward("hardtanh", x, min_val, max_val)


def hardtanh_grad(dy: Any, x: Any, *, min_val: float, max_val: float) -> Any:
    return _backward("hardtanh", dy, x, min_val, max_val)


@keeps_order
def silu(x: Any) -> Any:
    return _forward("silu", x)


def silu_grad(dy: Any, x: Any) -> Any:
    return _backward("silu", dy, x)


@keeps_order
def gelu(x: Any, *, approximate: str) -> Any:
    return _forward("gelu" if approximate == "none" else "gelu_tanh", x)


def gelu_grad(dy: Any, x: Any, *, approximate: str) -> Any:
    return _backward("gelu" if approximate == "none" else "gelu_tanh", dy, x)


@keeps_order
def hardswish(x: Any) -> Any:
    return _forward("hardswish", x)


def hardswish_grad(dy: Any, x: Any) -> Any:
    return _backward("hardswish", dy, x)


@keeps_order
def hardsigmoid(x: Any) -> Any:
    return _forward("hardsigmoid", x)


def hardsigmoid_grad(dy: Any, x: Any) -> Any:
    return _backward("hardsigmoid", dy, x)


@keeps_order
def elu(x: Any, *, alpha: float) -> Any:
    return _forward("elu", x, alpha)


def elu_grad(dy: Any, x: Any, *, alpha: float) -> Any:
    return _backward("elu", dy, x, alpha)


@keeps_order
def mish(x: Any) -> Any:
    return _forward("mish", x)


def mish_grad(dy: Any, x: Any) -> Any:
    return _backward("mish", dy, x)
