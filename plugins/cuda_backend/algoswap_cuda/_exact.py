"""float16 convolutions exact on NaN and infinity, as in the float64 convolution rounded once.

Some of cuDNN's float16 engines lose infinities (H200, cuDNN 9.19; torch gets the same, it runs cuDNN):
ResNet-50's first convolution (3 channels, 7x7, stride 2) gave 0 for 279 of 576 outputs that a planted +inf
makes infinite, and 0 for 450 of 930 outputs that overflow float16 from finite inputs, while its 3x3 and 1x1
layers kept every one (benchmarks/cuda_float16_infinities.py). So each float16 forward plan is *probed* once,
when it is built (``keeps_infinities``): run on operands with NaN and infinities planted, and on finite
operands scaled to overflow, its non-finite outputs are compared with those of the direct kernel below. The
plan choosers (_cudnn) take the first candidate that keeps them; such a plan runs as it is. Only where no
candidate does, the plan *loses infinities* and each call is followed by one kernel which, where any operand
held NaN or infinity, recomputes every output directly in float32 (conv, bias, residual, activation: what the
call computes; zero padding multiplied like any input), and otherwise reads the output it leaves and says
whether that holds NaN or infinity (an overflow such an engine turns into a finite value is not seen: the
kernel string says the plan loses infinities).

Whether an array holds NaN or infinity is a *flag*: SLOTS int32 on the device, one per block of the launch
that wrote it (each block writes its own slot, so nothing is zeroed first); raised where any slot is. A
convolution's output flag is remembered while the output lives (a weak reference), so the next convolution
that reads it, as its input or its residual, reads that flag instead of the array: each activation of a
network is read once, by the kernel after the convolution that made it. Arrays without a remembered flag (a
model's input, a pooling's output, a weight not known to be finite, a bias) are scanned by one launch before.
Nothing is read back on the host, so CUDA graphs record it all; on finite data each convolution costs one
read of its output. Only convolutions write these outputs, never in place afterwards (the only in-place ops
are optimizer updates, of parameters), so a remembered flag stays true while its array lives.
"""

from __future__ import annotations

import itertools
import weakref
from functools import lru_cache
from typing import Any, Iterable

import cupy as cp
import numpy as np
from algoswap import LRUCache, declare_cache

from ._epilogue import ACTIVATIONS
from ._runtime import channels_last, dtype_name, known_finite
from ._types import prelude

LOSING_INFINITIES = ("float16",)  # the dtypes whose cuDNN engines lose infinities: their convolutions come here
SLOTS, _THREADS = 512, 256  # the blocks of every flagging launch (each writes its slot) and their threads
SCANNED = 4  # the most arrays one scan launch reads
EDGE_FLIPS = 0.01  # the share of an overflow probe's infinities that may round to the largest finite value instead
LARGEST = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}  # largest finite
# dtype -> (the unsigned C type of its bit patterns, the exponent mask: all its bits set means inf or NaN)
BITS = {"float16": ("unsigned short", "0x7C00u"), "bfloat16": ("unsigned short", "0x7F80u"),
        "float32": ("unsigned int", "0x7F800000u"), "float64": ("unsigned long long", "0x7FF0000000000000ull")}

# A thread's share of an array in memory order: 16-byte loads between a scalar head (up to the first 16-byte
# boundary) and a scalar tail, the exponent test of each lane ORed into a register.
_NONFINITE = r"""
typedef BITS U;
__device__ inline int nonfinite(U u) { return (u & MASK) == MASK; }
__device__ inline int nonfinite_in(const U* p, long long n, long long thread, long long threads) {
    const long long per = 16 / sizeof(U);
    long long head = (long long)((16 - ((unsigned long long)p & 15)) & 15) / (long long)sizeof(U);
    head = head < n ? head : n;
    const long long vectors = (n - head) / per;
    int found = 0;
    for (long long i = thread; i < head; i += threads) found |= nonfinite(p[i]);
    const uint4* body = reinterpret_cast<const uint4*>(p + head);
    #pragma unroll 4
    for (long long i = thread; i < vectors; i += threads) {
        const uint4 v = body[i];
        const U* lanes = reinterpret_cast<const U*>(&v);
        for (int k = 0; k < per; ++k) found |= nonfinite(lanes[k]);
    }
    for (long long i = head + vectors * per + thread; i < n; i += threads) found |= nonfinite(p[i]);
    return found;
}
"""

_SCAN = r"""
extern "C" __global__ void flag_nonfinite(const U* a, long long na, const U* b, long long nb, const U* c, long long nc,
        const U* d, long long nd, int* flag) {
    const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x, threads = (long long)blockDim.x * gridDim.x;
    const int found = __syncthreads_or(nonfinite_in(a, na, thread, threads) | nonfinite_in(b, nb, thread, threads)
        | nonfinite_in(c, nc, thread, threads) | nonfinite_in(d, nd, thread, threads));
    if (threadIdx.x == 0) flag[blockIdx.x] = found;
}
"""


def _nonfinite_source(dtype: str) -> str:
    bits, mask = BITS[dtype]
    return _NONFINITE.replace("BITS", bits).replace("MASK", mask)


def scan_source(dtype: str) -> str:
    """The scan kernel flag_nonfinite for arrays of ``dtype``: block b writes slot b."""
    return _nonfinite_source(dtype) + _SCAN


@lru_cache(maxsize=8)
def _scan(dtype: str) -> Any:
    return cp.RawKernel(scan_source(dtype), "flag_nonfinite")


def _memory(array: Any) -> Any:
    """The elements of ``array`` as they lie in memory (a 1-D view where they fill one span, in any order, else
    a C-contiguous copy)."""
    axes = sorted(range(array.ndim), key=lambda axis: -array.strides[axis])
    view = array.transpose(axes)
    return view.reshape(-1) if view.flags.c_contiguous else cp.ascontiguousarray(array).reshape(-1)


def flag_nonfinite(arrays: tuple[Any, ...]) -> Any:
    """The flag (SLOTS device int32, any raised: ``bool(flag.any())``) of whether any of ``arrays`` (up to SCANNED,
    of one float dtype, in any memory order) holds NaN or infinity: one launch, nothing read back."""
    flag = cp.empty(SLOTS, cp.int32)
    scanned = [_memory(a) for a in arrays if a.size]
    if not scanned:
        flag[...] = 0
        return flag
    if len(scanned) > SCANNED or len({a.dtype for a in scanned}) > 1:
        raise ValueError(f"flag_nonfinite scans up to {SCANNED} arrays of one dtype, not {[(a.shape, a.dtype) for a in arrays]}")
    absent = SCANNED - len(scanned)
    args = [value for a, n in zip(scanned + [scanned[0]] * absent, [a.size for a in scanned] + [0] * absent)
            for value in (a, np.int64(n))]
    _scan(dtype_name(scanned[0].dtype))((SLOTS,), (_THREADS,), (*args, flag))
    return flag


# id -> (weak reference of a convolution's output, its flag), while the output lives
FLAGS = declare_cache("cuda_nonfinite_flags", 4096, "CUDA float16 conv2d: the non-finite flag of each live output, "
                      "read by the next convolution instead of its input")
_flags: LRUCache[tuple[weakref.ref[Any], Any]] = LRUCache(FLAGS)


def recorded(array: Any) -> Any:
    """The flag of ``array`` if a convolution wrote it (this very object, still alive), else None."""
    entry = _flags.get(id(array)) if array is not None else None
    return entry[1] if entry is not None and entry[0]() is array else None


def _record(array: Any, flag: Any) -> None:
    key = id(array)
    _flags.put(key, (weakref.ref(array, lambda ref: _flags.pop(key) if _flags.get(key, (None,))[0] is ref else None), flag))


# One thread per output (grid-stride), any memory order (element strides of x, w, y and the residual as y's);
# where no operand's flag is raised, each thread reads its share of y (in memory order: ``written``) instead.
_DIRECT = r"""
extern "C" __global__ void conv2d_exact_if_flagged(const int* fa, const int* fb, const int* fc, const S* x, const S* w,
        const S* b, const S* r, S* y, const U* written, long long size, int* flag,
        int n, int c, int h, int wd, int o, int kh, int kw, int oh, int ow, int sh, int sw, int ph, int pw, int dh, int dw,
        int groups, long long xn, long long xc, long long xh, long long xw, long long wo, long long wc, long long wh,
        long long ww, long long yn, long long yc, long long yh, long long yw) {
    int raised = 0;
    for (int i = threadIdx.x; i < SLOTS; i += blockDim.x) raised |= fa[i] | fb[i] | fc[i];
    raised = __syncthreads_or(raised);
    const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x, threads = (long long)blockDim.x * gridDim.x;
    int found = raised;
    if (!raised) found = nonfinite_in(written, size, thread, threads);
    else for (long long index = thread, total = (long long)n * o * oh * ow; index < total; index += threads) {
        int xo = index % ow, yo = (index / ow) % oh, oc = (index / ((long long)ow * oh)) % o;
        int batch = index / ((long long)ow * oh * o);
        int cg = c / groups, first = (oc / (o / groups)) * cg;
        T v = 0;
        for (int ci = 0; ci < cg; ++ci)
            for (int i = 0; i < kh; ++i) {
                int row = yo * sh - ph + i * dh;
                for (int j = 0; j < kw; ++j) {
                    int col = xo * sw - pw + j * dw;
                    T input = row >= 0 && row < h && col >= 0 && col < wd
                        ? (T)x[batch * xn + (first + ci) * xc + row * xh + col * xw] : (T)0;
                    v += input * (T)w[oc * wo + ci * wc + i * wh + j * ww];
                }
            }
        long long at = batch * yn + oc * yc + yo * yh + xo * yw;
        BODY
        y[at] = (S)v;
    }
    found = __syncthreads_or(found);
    if (threadIdx.x == 0) flag[blockIdx.x] = found;
}
"""


def direct_source(dtype: str, bias: bool, residual: bool, activation: str) -> tuple[str, str]:
    """The recomputing kernel of a call with these parts, for ``dtype``, and its name."""
    body = ("v += (T)b[oc]; " if bias else "") + ("v += (T)r[at]; " if residual else "") + ACTIVATIONS[activation]
    name = f"conv2d_exact_if_flagged{'_bias' * bias}{'_residual' * residual}_{activation}"
    kernel = _DIRECT.replace("BODY", body).replace("conv2d_exact_if_flagged", name).replace("SLOTS", str(SLOTS))
    return prelude(dtype) + _nonfinite_source(dtype) + kernel, name


@lru_cache(maxsize=32)
def _direct(dtype: str, bias: bool, residual: bool, activation: str) -> Any:
    return cp.RawKernel(*direct_source(dtype, bias, residual, activation))


def _elements(array: Any) -> list[np.int64]:
    return [np.int64(s // array.itemsize) for s in array.strides]


def _operand_flags(x: Any, w: Any, scan_weight: bool, bias: Any = None, residual: Any = None,
                  known: tuple[Any, Any] = (None, None)) -> list[Any]:
    """The flags that say whether a call's operands hold NaN or infinity: ``known`` (the remembered flags of x and
    the residual, or None), and one scan of the rest (a weight only where ``scan_weight``, a bias not known to be
    finite)."""
    flags = [flag for flag in known if flag is not None]
    unread = [a for a, flag in ((x, known[0]), (residual, known[1])) if a is not None and flag is None]
    unread += [w] * scan_weight + [bias] * (bias is not None and not known_finite(bias))
    if unread or not flags:
        flags.append(flag_nonfinite(tuple(unread)))
    return flags


def repair(x: Any, w: Any, y: Any, scan_weight: bool, stride: tuple[int, int], padding: Any, dilation: Any, groups: int,
           bias: Any = None, residual: Any = None, activation: str = "none", known: tuple[Any, Any] = (None, None),
           remember: bool = False) -> None:
    """Where ``x`` (or ``w``, when ``scan_weight``), ``bias`` or ``residual`` holds NaN or infinity (``known``: the
    flags of x and the residual already written), ``y`` becomes the call's exact result: conv(x, w) + bias +
    residual, then ``activation``. ``residual`` is in ``y``'s memory order. Where ``remember``, y's own flag is
    kept for the next convolution that reads y (the caller writes y no more)."""
    if y.size == 0:
        return
    flags = _operand_flags(x, w, scan_weight, bias, residual, known)  # the fused graph loses the bias's and residual's inf too
    out = _launch(flags, x, w, y, stride, padding, dilation, groups, bias, residual, activation)
    if remember:
        _record(y, out)


def exact_into(y: Any, x: Any, w: Any, stride: tuple[int, int], padding: Any, dilation: Any, groups: int, bias: Any = None,
               residual: Any = None, activation: str = "none") -> None:
    """``y`` becomes the call's exact result, whatever the operands hold."""
    _launch([cp.ones(SLOTS, cp.int32)], x, w, y, stride, padding, dilation, groups, bias, residual, activation)


def _launch(flags: list[Any], x: Any, w: Any, y: Any, stride: tuple[int, int], padding: Any, dilation: Any, groups: int,
            bias: Any, residual: Any, activation: str) -> Any:
    """The kernel after a call (up to three operand flags), and the flag of ``y`` it writes."""
    flags = flags + flags[:1] * (3 - len(flags))
    out = cp.empty(SLOTS, cp.int32)
    (top, _), (left, _) = padding
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    args = (*flags, x, w, y if bias is None else bias, y if residual is None else residual, y, _memory(y), np.int64(y.size), out,
            *map(np.int32, (n, c, h, wd, o, kh, kw, y.shape[2], y.shape[3], *stride, top, left, *dilation, groups)),
            *_elements(x), *_elements(w), *_elements(y))
    _direct(dtype_name(y.dtype), bias is not None, residual is not None, activation)((SLOTS,), (_THREADS,), args)
    return out


def probed(g: Any) -> bool:
    """Whether plans of the cuDNN geometry ``g`` are probed for the infinities they keep (forward, LOSING_INFINITIES)."""
    return bool(g.kind == "fprop" and g.dtype in LOSING_INFINITIES)


def kept(plan: Any) -> bool:
    """keeps_infinities, False where the probe itself fails (the plan is then repaired after each call)."""
    try:
        return keeps_infinities(plan)
    except Exception:  # noqa: BLE001 - no verdict: take the safe side
        return False


def first_keeping(plans: Iterable[Any]) -> Any:
    """The first of ``plans`` that keeps infinities; else the first, marked as losing them; None if there is none."""
    first = None
    for plan in plans:
        if kept(plan):
            return plan
        first = first or plan
    if first is not None:
        first.loses_infinities = True
    return first


def keeps_infinities(plan: Any) -> bool:
    """Whether the forward ``plan`` (a _cudnn.Plan of a dtype in LOSING_INFINITIES) gives the non-finite outputs
    the direct kernel gives (``same_non_finite``), in ``_rounds``: NaN and infinities planted in the input, in the
    bias, in the residual, each order of +inf, -inf and NaN over the first channels (an engine lost a -inf bias
    beside a NaN one and kept it beside a +inf); then finite operands scaled so that some outputs overflow. The
    first and last images are compared (a lost infinity of ResNet-50's first convolution showed in the second image
    only); in the overflow round up to EDGE_FLIPS of the infinities may be edge flips. Run once per plan, when it is
    built; False if the plan fails to run."""
    g = plan.geometry
    after = g.epilogue
    rng = cp.random.default_rng(0)
    w = _probe_array(rng.standard_normal(g.w, dtype=cp.float32) / np.sqrt(int(np.prod(g.w[1:]))), g)
    activation = after.activation if after is not None else "none"
    top = LARGEST[g.dtype]
    images = sorted({0, g.x[0] - 1})
    for round_, order in _rounds(after):
        x = cp.clip(rng.standard_normal(g.x, dtype=cp.float32) * (top / 2 if round_ == "overflow" else 1.0), -top * 0.9, top * 0.9)
        bias = rng.standard_normal(g.y[1], dtype=cp.float32) if after is not None and after.bias else None
        residual = rng.standard_normal(g.y, dtype=cp.float32) if after is not None and after.residual else None
        _plant({"input": x, "bias": bias, "residual": residual}.get(round_), order, images)
        exact_residual = None if residual is None else _probe_array(residual[images], g)  # in exact's memory order
        x, bias, residual = (None if a is None else _probe_array(a, g) for a in (x, bias, residual))
        y = _probe_array(cp.zeros(g.y, g.dtype), g)
        try:
            plan.run(x, w, y, *[a for a in (bias, residual) if a is not None])
        except Exception:  # noqa: BLE001 - a plan that does not run keeps nothing
            return False
        exact = _probe_array(cp.zeros((len(images), *g.y[1:]), g.dtype), g)
        exact_into(exact, x[images], w, g.stride, tuple(zip(g.pre, g.post)), g.dilation, g.x[1] // g.w[1], bias,
                   exact_residual, activation)
        if not same_non_finite(y[images], exact, top, EDGE_FLIPS if round_ == "overflow" else 0.0):
            return False
    return True


_NON_FINITE = (cp.inf, -cp.inf, cp.nan)
_ORDERS = tuple(itertools.permutations(_NON_FINITE))  # every order: each value beside each other one, on either side


def _rounds(after: Any) -> list[tuple[str, tuple[float, ...]]]:
    """The probe's rounds: (what is planted, the order of +inf, -inf and NaN over its first channels)."""
    planted = ["input"] + ["bias"] * bool(after is not None and after.bias) + ["residual"] * bool(after is not None and after.residual)
    return [(where, order) for where in planted for order in _ORDERS] + [("overflow", ())]


def same_non_finite(got: Any, want: Any, top: float, edge_flips: float = 0.0) -> bool:
    """Whether ``got`` has NaN, +inf and -inf where ``want`` has them, up to ``edge_flips`` (a share of want's
    infinities) of *edge flips*: an infinity against a finite value of the same sign within 1/512 of ``top``
    (the largest finite value), as two float32 sums of different order round an output at the range's edge. An
    engine that saturates infinities to ``top`` flips them all."""
    got, want = got.astype(cp.float32), want.astype(cp.float32)
    if not bool(cp.array_equal(cp.isnan(got), cp.isnan(want))):
        return False
    edge = top * (1 - 2.0 ** -9)
    flips = 0
    for sign in (1, -1):
        a, b = got * sign, want * sign
        differ = (a == cp.inf) != (b == cp.inf)
        near = cp.minimum(a, b) >= edge
        if bool((differ & ~near).any()):
            return False
        flips += int(differ.sum())
    return flips <= edge_flips * int(cp.isinf(want).sum())


def _plant(array: Any, order: tuple[float, ...], images: list[int]) -> None:
    """``order`` over the first channels of ``array`` (a bias, or an input or residual, in each of ``images`` at a
    spatial position of its own for each channel); nothing where ``array`` is None."""
    if array is None:
        return
    for channel, value in zip(range(array.shape[0] if array.ndim == 1 else array.shape[1]), order):
        if array.ndim == 1:
            array[channel] = value
            continue
        h, w = array.shape[2:]
        for image in images:
            array[image, channel, (h // 2 + channel) % h, (w // 3 + channel) % w] = value


def _probe_array(values: Any, g: Any) -> Any:
    """``values`` in ``g``'s dtype and memory order (NHWC where g is channels-last)."""
    values = values.astype(g.dtype, copy=False)
    return channels_last(values) if g.channels_last and values.ndim == 4 else values
