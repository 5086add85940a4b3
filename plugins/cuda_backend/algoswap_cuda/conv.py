"""conv2d and its gradients: cuDNN engines (named after the legacy algorithms, and ``guess``), our
``direct`` CUDA kernel and ``smm`` (im2col gather + cuBLAS batched matrix products). NCHW / OIHW
CuPy arrays; padding modes other than zeros are a gather before the convolution.

cuDNN's forward convolutions run in NHWC memory order (weights KRSC) for the half precisions (their
tensor-core engines want it) and wherever the input already is NHWC; their output keeps that order (a
channels-last array of NCHW shape). In the half precisions a fused call (conv2d_fused) is one cuDNN graph
(convolution, bias, residual, activation) where cuDNN builds one, else the convolution and one epilogue pass."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import ConvGeometry, LRUCache, conv_geometry, declare_cache, is_channels_last

from . import _blas, _epilogue, _exact, _gather, _kernels, _runtime
from ._runtime import dtype_name

Pair = tuple[int, int]
PadHW = tuple[tuple[int, int], tuple[int, int]]
NO_PADDING: PadHW = ((0, 0), (0, 0))
WINOGRAD_REASON = ("offered for 3x3 filters only: cuDNN's float32 non-fused Winograd on 5x5 filters was measured at "
                   "relative error 7e-4 (float32 algorithms here stay within 2e-5)")


# ------------------------------------------------------------------------------------------- cuDNN

def _cudnn() -> Any:
    from . import _cudnn

    return _cudnn


def _cudnn_geometry(kind: str, g: ConvGeometry, dtype: str, channels_last: bool = False, epilogue: Any = None) -> Any:
    """The convolution as cuDNN sees it, in direction ``kind`` ("fprop", "dgrad" or "wgrad")."""
    (top, bottom), (left, right) = g.padding
    return _cudnn().Geometry(kind, g.input, g.weight, g.output, g.stride, (top, left), (bottom, right), g.dilation, dtype,
                             channels_last, epilogue)


def on_tensor_cores(dtype: str) -> bool:
    """Whether forward convolutions of ``dtype`` run on tensor cores: the half precisions, and float32 while TF32
    is on (``_runtime.tf32``: as torch has it for a swapped model). Those run in NHWC and fuse what follows."""
    return dtype in _runtime.HALF or (dtype == "float32" and _runtime.tf32("conv"))


def runs_channels_last(dtype: str, x_channels_last: bool, algorithm: str = "guess") -> bool:
    """Whether a cuDNN forward convolution runs in NHWC: where x is NHWC, in the half precisions, and in float32 on
    TF32 tensor cores where cuDNN picks the engine (``guess``, ``find``: a named legacy engine such as
    winograd_nonfused has no NHWC form, so it runs as the layer's input is)."""
    if x_channels_last or dtype in _runtime.HALF:
        return True
    return on_tensor_cores(dtype) and algorithm in ("guess", "find")


def _after(dtype: str, bias: bool, residual: bool, activation: str, nhwc: bool = True) -> Any:
    """What follows a forward convolution on tensor cores (a _pointwise.Epilogue for _fusion.choose), else None
    (nothing follows, or float64, float32 without TF32 or in NCHW, whose fused graphs do not build: the epilogue
    pass)."""
    fuses = dtype in _runtime.HALF or (nhwc and on_tensor_cores(dtype))
    if not fuses or not (bias or residual or activation != "none"):
        return None
    from ._pointwise import Epilogue

    return Epilogue(bias, residual, activation)


def _call_after(call: Any, nhwc: bool) -> Any:
    """_after of a conv2d or conv2d_fused call."""
    found = _epilogue.parts(call)
    return _after(call.dtype, "+ bias" in found, "+ residual" in found, call.attrs.get("activation", "none"), nhwc)


def _fusion() -> Any:
    from . import _fusion

    return _fusion


def _zero_padded(g: ConvGeometry) -> ConvGeometry:
    """The convolution cuDNN runs: padding modes other than zeros are padded here first."""
    return g if g.padding_mode == "zeros" else g.padded_first()


_DIRECTIONS = {"conv2d": "fprop", "conv2d_fused": "fprop", "conv2d_grad_input": "dgrad", "conv2d_grad_weight": "wgrad"}


def _by_timing(algorithm: str, kind: str = "fprop") -> tuple[str, str]:
    """A forward ``guess`` runs as ``find`` (its timed choice and its cache) where benchmark mode is on
    (``_runtime.benchmark``: what turned it on is the second item); anything else runs as it is ("")."""
    why = _runtime.benchmark() if algorithm == "guess" and kind == "fprop" else ""
    return ("find", why) if why else (algorithm, "")


def _plan_of(call: Any, algorithm: str) -> Any:
    """The _fusion.Choice serving ``call`` (its plan built and cached now: a fused graph, else the plain
    convolution); _cudnn.NotServed if none."""
    kind = _DIRECTIONS[call.op]
    algorithm = _by_timing(algorithm, kind)[0]
    g = _zero_padded(call.geometry)
    if kind != "fprop":
        return _fusion().Choice(_cudnn().plan(_cudnn_geometry(kind, g, call.dtype), algorithm))
    nhwc = runs_channels_last(call.dtype, False, algorithm)
    return _fusion().choose(_cudnn_geometry(kind, g, call.dtype, nhwc), _call_after(call, nhwc), algorithm)


def supports_cudnn(call: Any, algorithm: str = "guess") -> bool | str:
    """cuDNN is asked: True if the engine builds for this layer, else why not."""
    try:
        cudnn = _cudnn()
    except Exception as exc:  # noqa: BLE001 - a missing frontend is a reason
        return f"the cuDNN frontend does not load (install algoswap-cuda[cu12] or [cu13]): {type(exc).__name__}: {exc}"
    if algorithm.startswith("winograd") and tuple(call.shape("weight")[2:]) != (3, 3):
        return WINOGRAD_REASON
    try:
        _plan_of(call, algorithm)
    except cudnn.NotServed as exc:
        return str(exc)
    return True


def kernel_cudnn(call: Any, algorithm: str = "guess") -> str:
    why = _by_timing(algorithm, _DIRECTIONS[call.op])[1]
    choice = _plan_of(call, algorithm)
    label = str(choice.plan.label)
    if choice.plan.geometry.epilogue is None and _DIRECTIONS[call.op] == "fprop" and _epilogue.parts(call):
        label = f"{label}, {_epilogue.label(call)}" + (f" ({choice.note})" if choice.note else "")
    return f"{label}; engine chosen by timing ({why})" if why else label


_forward_plans: LRUCache[tuple[Any, tuple[int, ...]]] = LRUCache(declare_cache(
    "cuda_forward_plans", 1024, "CUDA conv2d: the cuDNN plan and output shape of each forward call's shapes, padding, "
    "memory order, fused epilogue and TF32"))


def _forward(x: Any, w: Any, algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, mode: str, bias: Any = None,
             residual: Any = None, activation: str = "none") -> Any:
    """The convolution, then bias, residual and activation: in its cuDNN graph where _fusion chooses one,
    else in one epilogue pass."""
    probed = dtype_name(x.dtype) in _exact.LOSING_INFINITIES
    known = (_exact.recorded(x), _exact.recorded(residual)) if probed else (None, None)  # before x and residual are copied
    if mode != "zeros":
        x, padding = _gather.pad(x, padding, mode), NO_PADDING
    algorithm = _by_timing(algorithm)[0]
    if type(padding) is not tuple or type(stride) is not tuple or type(dilation) is not tuple:  # lists (JSON)
        stride, dilation, padding = tuple(stride), tuple(dilation), tuple(map(tuple, padding))  # type: ignore[assignment]
    channels_last = runs_channels_last(dtype_name(x.dtype), is_channels_last(x), algorithm)
    weight = w  # as given (KCRS, or KRSC from a channels-last model): the padding NaN pass reads it in place
    x, w = (_runtime.channels_last(x), _runtime.channels_last_weight(w)) if channels_last else (_runtime.contiguous(x), _runtime.contiguous(w))
    after = (bias is not None, residual is not None, activation)
    key = (algorithm, x.shape, w.shape, stride, padding, dilation, x.dtype.char, channels_last, after, _runtime.tf32("conv"))
    found = _forward_plans.get(key)  # the per-call path: one dictionary look-up
    if found is None:
        found = _forward_plans.put(key, _forward_plan(x, w, algorithm, stride, padding, dilation, channels_last, after))
    plan, shape = found
    y = _runtime.empty(shape, x.dtype, channels_last)
    fused = plan.geometry.epilogue is not None
    if fused:
        residual = None if residual is None else _epilogue.same_order(residual, y)
        plan.run(x, w, y, *[a for a in (bias, residual) if a is not None])
    else:
        plan.run(x, w, y)
    if plan.loses_infinities:  # a float16 plan whose probe found infinities lost (_exact)
        epilogue_pass = not fused and (bias is not None or residual is not None or activation != "none")  # it writes y later
        _exact.repair(x, w, y, not _runtime.known_finite(weight), stride, padding, dilation, x.shape[1] // w.shape[1],
                      bias if fused else None, residual if fused else None, activation if fused else "none",
                      known if fused else (known[0], None), remember=not (epilogue_pass or _padding_nan_runs(padding, weight)))
    _padding_nan_forward(x, weight, y, stride, padding, dilation)  # NaN stays NaN through bias, residual and activation
    return y if fused else _epilogue.apply(y, bias, residual, activation)


def _forward_plan(x: Any, w: Any, algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, channels_last: bool,
                  after: tuple[bool, bool, str]) -> tuple[Any, tuple[int, ...]]:
    """The plan of a forward call (its fused graph or the plain convolution: _fusion.choose) and the output shape."""
    g = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation)
    geometry = _cudnn_geometry("fprop", g, dtype_name(x.dtype), channels_last)
    return _fusion().choose(geometry, _after(dtype_name(x.dtype), *after, channels_last), algorithm).plan, g.output


def _padding_nan_runs(padding: PadHW, w: Any) -> bool:
    """Whether _padding_nan_forward may write the output: some padding, and a weight not known to be finite."""
    return any(map(any, padding)) and not _runtime.known_finite(w)


def _padding_nan_forward(x: Any, w: Any, y: Any, stride: Pair, padding: PadHW, dilation: Pair) -> None:
    """NaN where a zero-padding tap meets a non-finite weight, as in PyTorch (cuDNN skips those taps).
    Asynchronous: one thread per weight, which does nothing more when the weight is finite; not launched
    for the GPU copy of a frozen weight known to be finite (a swap_backend Model's)."""
    if _padding_nan_runs(padding, w):
        (top, _), (left, _) = padding
        krsc = is_channels_last(w)  # a channels-last torch model's weight, as it crossed: read in place
        w = w if krsc else _runtime.contiguous(w)
        _kernels.launch(_kernels.PADDING_NAN, "padding_nan_forward", dtype_name(y.dtype), w.size, (w, y), None, y.shape[0],
                        *w.shape, *x.shape[2:], *y.shape[2:], *stride, top, left, *dilation, not y.flags.c_contiguous, krsc)


def _padding_nan_weight_grad(x: Any, dy: Any, dw: Any, stride: Pair, padding: PadHW, dilation: Pair) -> None:
    """NaN in dw[o, :, i, j] where tap (i, j) reads the zero padding at a non-finite grad_output of channel o,
    as in PyTorch (cuDNN skips those taps). Asynchronous: one thread per grad_output row, reading its border."""
    (top, bottom), (left, right) = padding
    if top or bottom or left or right:
        claimed = cp.zeros(dw.shape[0] * dw.shape[2] * dw.shape[3], dtype=cp.int32)
        _kernels.launch(_kernels.PADDING_NAN, "padding_nan_weight_grad", dtype_name(dw.dtype), dy.shape[0] * dy.shape[1] * dy.shape[2],
                        (dy, dw, claimed), dy.shape[0] * dy.shape[1], *dw.shape, *x.shape[2:], *dy.shape[2:], *stride,
                        top, left, *dilation)


def _cudnn_conv2d(algorithm: str) -> Any:
    def conv2d(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
               padding_mode: str) -> Any:
        return _forward(x, w, algorithm, stride, padding, dilation, padding_mode, b)

    conv2d.__name__ = conv2d.__qualname__ = f"conv2d_{algorithm}"
    picks = {"guess": "heuristic pick", "find": "timed pick"}
    conv2d.__doc__ = f"cuDNN {picks.get(algorithm, algorithm)} convolution."
    return conv2d


def _cudnn_conv2d_fused(algorithm: str) -> Any:
    def conv2d_fused(x: Any, w: Any, b: Any, residual: Any, *, activation: str, stride: Pair, padding: PadHW,
                     dilation: Pair, groups: int, padding_mode: str) -> Any:
        return _forward(x, w, algorithm, stride, padding, dilation, padding_mode, b, residual, activation)

    conv2d_fused.__name__ = conv2d_fused.__qualname__ = f"conv2d_{algorithm}_fused"
    conv2d_fused.__doc__ = f"cuDNN {algorithm} convolution with bias, residual and activation (one cuDNN graph where one builds)."
    return conv2d_fused


# The registry's references: guess, find and each engine of algoswap_cuda.ENGINES but winograd (not offered:
# FUSED_WINOGRAD_REASON), defined one by one so that their names are read from this code unimported (algoswap._names)
conv2d_guess = _cudnn_conv2d("guess")
conv2d_find = _cudnn_conv2d("find")
conv2d_implicit_gemm = _cudnn_conv2d("implicit_gemm")
conv2d_implicit_precomp_gemm = _cudnn_conv2d("implicit_precomp_gemm")
conv2d_gemm = _cudnn_conv2d("gemm")
conv2d_fft = _cudnn_conv2d("fft")
conv2d_fft_tiling = _cudnn_conv2d("fft_tiling")
conv2d_winograd_nonfused = _cudnn_conv2d("winograd_nonfused")
conv2d_guess_fused = _cudnn_conv2d_fused("guess")
conv2d_find_fused = _cudnn_conv2d_fused("find")
conv2d_implicit_gemm_fused = _cudnn_conv2d_fused("implicit_gemm")
conv2d_implicit_precomp_gemm_fused = _cudnn_conv2d_fused("implicit_precomp_gemm")
conv2d_gemm_fused = _cudnn_conv2d_fused("gemm")
conv2d_fft_fused = _cudnn_conv2d_fused("fft")
conv2d_fft_tiling_fused = _cudnn_conv2d_fused("fft_tiling")
conv2d_winograd_nonfused_fused = _cudnn_conv2d_fused("winograd_nonfused")


def fused(conv: Any) -> Any:
    """conv2d_fused on ``conv``: the convolution, then bias, residual and activation in one pass."""
    def conv2d_fused(x: Any, w: Any, b: Any, residual: Any, *, activation: str, **attrs: Any) -> Any:
        return _epilogue.apply(conv(x, w, None, **attrs), b, residual, activation)

    conv2d_fused.__name__ = conv2d_fused.__qualname__ = f"{conv.__name__}_fused"
    return conv2d_fused


def kernel_fused(call: Any, kernel: str | None = None) -> str:
    """The kernel of a conv2d_fused call on smm (default) or direct."""
    return f"{kernel or kernel_smm(call)}, {_epilogue.label(call)}"


def conv2d_grad_input(dy: Any, w: Any, *, input_size: tuple[int, ...], stride: Pair, padding: PadHW,
                      dilation: Pair, groups: int, padding_mode: str) -> Any:
    """cuDNN backward data (heuristic pick); for non-zero padding modes, folded back by scatter-add."""
    g = _zero_padded(conv_geometry(input_size, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                                   padding_mode=padding_mode))
    dy, w = _runtime.contiguous(dy), _runtime.contiguous(w)
    plan = _cudnn().plan(_cudnn_geometry("dgrad", g, dtype_name(dy.dtype)), "guess")
    dx = cp.empty(g.input, dtype=dy.dtype)
    plan.run(dy, w, dx)
    return dx if padding_mode == "zeros" else _gather.unpad(dx, tuple(input_size[2:]), padding, padding_mode)  # type: ignore[arg-type]


def conv2d_grad_weight(dy: Any, x: Any, *, weight_size: tuple[int, ...], stride: Pair, padding: PadHW,
                       dilation: Pair, groups: int, padding_mode: str) -> Any:
    """cuDNN backward filter (heuristic pick)."""
    if padding_mode != "zeros":
        x, padding = _gather.pad(x, padding, padding_mode), NO_PADDING
    dy, x = _runtime.contiguous(dy), _runtime.contiguous(x)
    g = conv_geometry(x.shape, weight_size, stride=stride, padding=padding, dilation=dilation, groups=groups)
    plan = _cudnn().plan(_cudnn_geometry("wgrad", g, dtype_name(dy.dtype)), "guess")
    dw = cp.empty(tuple(weight_size), dtype=dy.dtype)
    plan.run(x, dy, dw)
    _padding_nan_weight_grad(x, dy, dw, stride, padding, dilation)
    return dw


def conv2d_grad_bias(dy: Any) -> Any:
    return dy.sum(axis=(0, 2, 3))


# ---------------------------------------------------------------------------- direct (our kernel)

def conv2d_direct(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
                  padding_mode: str) -> Any:
    """One CUDA thread per output element, summing its window (CuPy raw kernel)."""
    if padding_mode != "zeros":
        x, padding = _gather.pad(x, padding, padding_mode), NO_PADDING
    x, w = _runtime.contiguous(x), _runtime.contiguous(w)
    y = cp.empty(conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation).output, dtype=x.dtype)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    bias = w if b is None else _runtime.contiguous(b)
    _kernels.launch(_kernels.CONV2D_DIRECT, "conv2d_direct", dtype_name(x.dtype), y.size, (x, w, bias, y), None,
                    n, c, h, wd, o, kh, kw, y.shape[2], y.shape[3], *stride, padding[0][0], padding[1][0],
                    *dilation, groups, b is not None)
    return y


# -------------------------------------------------------------------- smm (im2col + cuBLAS gemm)

def _columns(x: Any, w_shape: tuple[int, ...], out: tuple[int, ...], stride: Pair, padding: PadHW, dilation: Pair, mode: str,
             groups: int) -> Any:
    """im2col of x as (N, groups, C/groups*KH*KW, OH*OW), padding of any mode included."""
    n, c, h, wd = x.shape
    index = _gather.columns_index((c, h, wd), tuple(w_shape[2:]), out, tuple(stride), tuple(dilation), padding, mode)
    return _gather.gather(x, index).reshape(n, groups, -1, out[0] * out[1])


def conv2d_smm(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
               padding_mode: str) -> Any:
    """im2col (one gather) then one cuBLAS batched matrix product per group."""
    y_shape = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation).output
    cols = _columns(x, w.shape, y_shape[2:], stride, padding, dilation, padding_mode, groups)
    y = _blas.matmul(w.reshape(1, groups, w.shape[0] // groups, -1), cols).reshape(y_shape)
    return _epilogue.apply(y, b)


def conv2d_grad_input_smm(dy: Any, w: Any, *, input_size: tuple[int, ...], stride: Pair, padding: PadHW,
                          dilation: Pair, groups: int, padding_mode: str) -> Any:
    """W^T dy per group (cuBLAS), then col2im as one scatter-add."""
    n, c, h, wd = input_size
    out = dy.shape[2:]
    index = _gather.columns_index((c, h, wd), tuple(w.shape[2:]), out, tuple(stride), tuple(dilation), padding, padding_mode)
    wg = w.reshape(groups, w.shape[0] // groups, -1)
    cols = _blas.matmul(wg.transpose(0, 2, 1)[None], dy.reshape(n, groups, -1, out[0] * out[1]))
    return _gather.scatter(cols.reshape(n, *index.shape), index, c * h * wd).reshape(input_size)


def conv2d_grad_weight_smm(dy: Any, x: Any, *, weight_size: tuple[int, ...], stride: Pair, padding: PadHW,
                           dilation: Pair, groups: int, padding_mode: str) -> Any:
    """dy times im2col(x)^T per group, the batch folded into the contraction (cuBLAS)."""
    n, o = dy.shape[:2]
    cols = _columns(x, weight_size, dy.shape[2:], stride, padding, dilation, padding_mode, groups)
    lhs = dy.reshape(n, groups, o // groups, -1).transpose(1, 2, 0, 3).reshape(groups, o // groups, -1)
    rhs = cols.transpose(1, 0, 3, 2).reshape(groups, -1, cols.shape[2])
    return _blas.matmul(lhs, rhs).reshape(weight_size)


def kernel_smm(call: Any) -> str:
    return "im2col gather (CuPy) + cuBLAS batched GEMM (cupy.matmul)"


conv2d_smm_fused = fused(conv2d_smm)
conv2d_direct_fused = fused(conv2d_direct)
