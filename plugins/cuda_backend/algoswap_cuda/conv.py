"""conv2d and its gradients: cuDNN engines (named after the legacy algorithms, and ``guess``), our
``direct`` CUDA kernel and ``smm`` (im2col gather + cuBLAS batched matrix products). NCHW / OIHW
CuPy arrays; padding modes other than zeros are a gather before the convolution."""

from __future__ import annotations

from typing import Any

import cupy as cp

from algoswap import ConvGeometry, LRUCache, conv_geometry, declare_cache

from . import _blas, _epilogue, _gather, _kernels, _runtime

Pair = tuple[int, int]
PadHW = tuple[tuple[int, int], tuple[int, int]]
NO_PADDING: PadHW = ((0, 0), (0, 0))
WINOGRAD_REASON = ("offered for 3x3 filters only: cuDNN's float32 non-fused Winograd on 5x5 filters was measured at "
                   "relative error 7e-4 (float32 algorithms here stay within 2e-5)")


# ------------------------------------------------------------------------------------------- cuDNN

def _cudnn() -> Any:
    from . import _cudnn

    return _cudnn


def _cudnn_geometry(kind: str, g: ConvGeometry, dtype: str) -> Any:
    """The convolution as cuDNN sees it, in direction ``kind`` ("fprop", "dgrad" or "wgrad")."""
    (top, bottom), (left, right) = g.padding
    return _cudnn().Geometry(kind, g.input, g.weight, g.output, g.stride, (top, left), (bottom, right), g.dilation, dtype)


def _zero_padded(g: ConvGeometry) -> ConvGeometry:
    """The convolution cuDNN runs: padding modes other than zeros are padded here first."""
    return g if g.padding_mode == "zeros" else g.padded_first()


_DIRECTIONS = {"conv2d": "fprop", "conv2d_fused": "fprop", "conv2d_grad_input": "dgrad", "conv2d_grad_weight": "wgrad"}


def _plan_of(call: Any, algorithm: str) -> Any:
    """The cuDNN plan serving ``call`` (built and cached now); _cudnn.NotServed if none."""
    return _cudnn().plan(_cudnn_geometry(_DIRECTIONS[call.op], _zero_padded(call.geometry), call.dtype), algorithm)


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
    label = str(_plan_of(call, algorithm).label)
    return kernel_fused(call, label) if call.op == "conv2d_fused" else label


_forward_plans: LRUCache[tuple[Any, tuple[int, ...]]] = LRUCache(declare_cache(
    "cuda_forward_plans", 1024, "CUDA conv2d: the cuDNN plan and output shape of each forward call's shapes, padding and TF32"))


def _forward(x: Any, w: Any, b: Any, algorithm: str, stride: Pair, padding: PadHW, dilation: Pair, mode: str) -> Any:
    if mode != "zeros":
        x, padding = _gather.pad(x, padding, mode), NO_PADDING
    x, w = _runtime.contiguous(x), _runtime.contiguous(w)
    if type(padding) is not tuple or type(stride) is not tuple or type(dilation) is not tuple:  # lists (JSON)
        stride, dilation, padding = tuple(stride), tuple(dilation), tuple(map(tuple, padding))  # type: ignore[assignment]
    key = (algorithm, x.shape, w.shape, stride, padding, dilation, x.dtype.char, _runtime.tf32())
    found = _forward_plans.get(key)  # the per-call path: one dictionary look-up
    if found is None:
        g = conv_geometry(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation)
        found = _forward_plans.put(key, (_cudnn().plan(_cudnn_geometry("fprop", g, x.dtype.name), algorithm), g.output))
    plan, shape = found
    y = cp.empty(shape, dtype=x.dtype)
    plan.run(x, w, y)
    _padding_nan_forward(x, w, y, stride, padding, dilation)
    return _epilogue.apply(y, b)


def _padding_nan_forward(x: Any, w: Any, y: Any, stride: Pair, padding: PadHW, dilation: Pair) -> None:
    """NaN where a zero-padding tap meets a non-finite weight, as in PyTorch (cuDNN skips those taps).
    Asynchronous: one thread per weight, which does nothing more when the weight is finite; not launched
    for the GPU copy of a frozen weight known to be finite (a swap_backend Model's)."""
    (top, bottom), (left, right) = padding
    if (top or bottom or left or right) and not _runtime.known_finite(w):
        _kernels.launch(_kernels.PADDING_NAN, "padding_nan_forward", y.dtype.name, w.size, (w, y), None, y.shape[0],
                        *w.shape, *x.shape[2:], *y.shape[2:], *stride, top, left, *dilation)


def _padding_nan_weight_grad(x: Any, dy: Any, dw: Any, stride: Pair, padding: PadHW, dilation: Pair) -> None:
    """NaN in dw[o, :, i, j] where tap (i, j) reads the zero padding at a non-finite grad_output of channel o,
    as in PyTorch (cuDNN skips those taps). Asynchronous: one thread per grad_output row, reading its border."""
    (top, bottom), (left, right) = padding
    if top or bottom or left or right:
        claimed = cp.zeros(dw.shape[0] * dw.shape[2] * dw.shape[3], dtype=cp.int32)
        _kernels.launch(_kernels.PADDING_NAN, "padding_nan_weight_grad", dw.dtype.name, dy.shape[0] * dy.shape[1] * dy.shape[2],
                        (dy, dw, claimed), dy.shape[0] * dy.shape[1], *dw.shape, *x.shape[2:], *dy.shape[2:], *stride,
                        top, left, *dilation)


def _cudnn_conv2d(algorithm: str) -> Any:
    def conv2d(x: Any, w: Any, b: Any, *, stride: Pair, padding: PadHW, dilation: Pair, groups: int,
               padding_mode: str) -> Any:
        return _forward(x, w, b, algorithm, stride, padding, dilation, padding_mode)

    conv2d.__name__ = conv2d.__qualname__ = f"conv2d_{algorithm}"
    picks = {"guess": "heuristic pick", "find": "timed pick"}
    conv2d.__doc__ = f"cuDNN {picks.get(algorithm, algorithm)} convolution."
    return conv2d


conv2d_guess = _cudnn_conv2d("guess")
conv2d_find = _cudnn_conv2d("find")
conv2d_implicit_gemm = _cudnn_conv2d("implicit_gemm")
conv2d_implicit_precomp_gemm = _cudnn_conv2d("implicit_precomp_gemm")
conv2d_gemm = _cudnn_conv2d("gemm")
conv2d_fft = _cudnn_conv2d("fft")
conv2d_fft_tiling = _cudnn_conv2d("fft_tiling")
conv2d_winograd = _cudnn_conv2d("winograd")
conv2d_winograd_nonfused = _cudnn_conv2d("winograd_nonfused")


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
    plan = _cudnn().plan(_cudnn_geometry("dgrad", g, dy.dtype.name), "guess")
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
    plan = _cudnn().plan(_cudnn_geometry("wgrad", g, dy.dtype.name), "guess")
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
    _kernels.launch(_kernels.CONV2D_DIRECT, "conv2d_direct", x.dtype.name, y.size, (x, w, bias, y), None,
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


conv2d_guess_fused = fused(conv2d_guess)
conv2d_find_fused = fused(conv2d_find)
conv2d_implicit_gemm_fused = fused(conv2d_implicit_gemm)
conv2d_implicit_precomp_gemm_fused = fused(conv2d_implicit_precomp_gemm)
conv2d_gemm_fused = fused(conv2d_gemm)
conv2d_fft_fused = fused(conv2d_fft)
conv2d_fft_tiling_fused = fused(conv2d_fft_tiling)
conv2d_winograd_nonfused_fused = fused(conv2d_winograd_nonfused)
conv2d_smm_fused = fused(conv2d_smm)
conv2d_direct_fused = fused(conv2d_direct)
