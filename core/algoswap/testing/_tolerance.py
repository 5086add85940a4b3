"""Comparing numbers: the one tolerance policy of algoswap's tests and of the conformance kit (``mismatch``;
the repo's tests assert it with ``assert_close`` in tests/helpers.py).

The policy
----------
A floating-point result is compared with a reference by the norm of their difference, measured
against the *scale of the terms the result is computed from*, and bounded by what rounding can do
to a computation of that length:

    ||out - ref||_2  <=  bound * ||scale||_2,      bound = C * (L * u + n * u_acc)

- ``u`` is the unit roundoff of the precision the result was computed in (2**-24 for float32,
  2**-53 for float64, 2**-8 for bfloat16, 2**-11 for float16); ``u_acc`` that of the precision it
  accumulates in (the same, except that half precisions accumulate in float32, as oneDNN and
  cuDNN do). The ``L * u`` term is the rounding of the result to its dtype (L = 1 for one op;
  ``layers`` for a network, whose every layer rounds its output).
- ``n`` (``reduction_length``) is the number of terms added to make one element of the result:
  Cin/groups*kh*kw (+1 for a bias) for a convolution, K for a matrix product, the axis length for
  a softmax, 1 for an elementwise op. A sum of n products computed in any order (pairwise, blocked,
  SIMD lanes) satisfies |fl(sum) - sum| <= gamma_n * sum(|terms|), gamma_n = n*u/(1 - n*u)
  (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5): a worst-case bound, so no
  draw of the inputs can exceed it. The typical error grows like sqrt(n)*u; we take the worst
  case anyway, because a tolerance a lucky draw can break is exactly what makes a suite red by
  chance, and n*u stays far below the error of any real bug (a dropped term, a wrong index, a
  wrong dtype give errors of order 1/n or more).
- ``scale`` is, element by element, the magnitude of those terms: the same computation done on
  absolute values (``conv2d(|x|, |w|) + |b|``, ``mean(|x|)``; see algoswap/testing/_scales.py
  for every op). A result that can be near zero (a mean, a sum, a softmax gradient, the centred values of a
  normalisation) is compared against this scale, never against its own norm: cancellation leaves
  an absolute error of order u*scale, which is a huge *relative* error of a result near zero.
  When the result cannot cancel (elementwise ops, pooling maxima), ``scale`` defaults to ``ref``.
- ``C = 4`` covers the few chained stages of composite ops (softmax: subtract, exp, sum,
  divide; normalisations: two reductions and a rescale) and the rounding of intermediate results an
  op is given (a float32 forward output fed to its gradient).
- When the reference was itself computed in finite precision (a float32 torch model, or two
  float64 computations), the reference's bound is added (``ref_dtype``, taken from ``ref`` by
  default: a float64 reference costs a float32 result nothing).
- Whole networks (``network_terms``) combine their layers' bounds (u + n_l*u_acc each) as
  independent errors, in quadrature: L = sqrt(number of layers), n = sqrt(sum of n_l**2), which
  bounds sqrt(sum((u + n_l*u_acc)**2)). This is a model, not a theorem: first-order propagation
  through layers that neither amplify nor damp relative errors (true of the zoo's normalised
  random-init models), errors of different layers (other data, other operations) uncorrelated, the
  output compared against its own norm. It is loose (per-op accuracy is the conformance suite's
  job), yet tight enough to catch wiring: a dropped residual or a wrong layer is an error of order 1.
- Non-finite values must match exactly (NaN where the reference has NaN, the same infinities);
  the finite rest is compared as above.

``mismatch`` says why a result fails (the observed error, the bound and how it was made), or "".
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

SAFETY = 4.0
# tfloat32: float32 whose products take operands rounded to 10 mantissa bits (cuDNN, cuBLAS on GPUs)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "tfloat32": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}


def dtype_name(dtype: Any) -> str:
    """'float32' for np.float32, np.dtype('float32'), 'float32', torch.float32, or an array (or list) of it."""
    if isinstance(dtype, (list, tuple, float, int)):
        dtype = np.asarray(dtype).dtype
    elif not isinstance(dtype, type):
        dtype = getattr(dtype, "dtype", dtype)
    name = str(dtype).removeprefix("torch.")
    if name in UNIT_ROUNDOFF or name in ("int64", "int32", "bool"):
        return name
    return str(np.dtype(dtype).name)


def unit_roundoff(dtype: Any) -> float:
    """Half the distance from 1 to the next float of ``dtype``: the relative error of one rounding."""
    return UNIT_ROUNDOFF[dtype_name(dtype)]


def tolerance(dtype: Any, reduction_length: int = 1, accumulate: Any = None, layers: int = 1) -> float:
    """The bound C*(L*u + n*u_acc) on ||error|| / ||scale|| of a result computed in ``dtype`` (0 for integers)."""
    name = dtype_name(dtype)
    if name not in UNIT_ROUNDOFF:
        return 0.0
    u = UNIT_ROUNDOFF[name]
    u_acc = unit_roundoff(accumulate) if accumulate is not None else min(u, UNIT_ROUNDOFF["float32"])
    return SAFETY * (layers * u + max(int(reduction_length), 1) * u_acc)


def comparison_bound(dtype: Any, ref_dtype: Any, reduction_length: int = 1, accumulate: Any = None, layers: int = 1) -> float:
    """The bound ``mismatch`` allows on ||out - ref|| / ||scale||: the result's ``tolerance`` plus the reference's."""
    return tolerance(dtype, reduction_length, accumulate, layers) + tolerance(ref_dtype, reduction_length, accumulate, layers)


def network_terms(module: Any, backward_of: tuple[int, ...] | None = None, steps: int = 1,
                  functional: tuple[int, ...] = ()) -> dict[str, int]:
    """``layers`` and ``reduction_length`` of a torch network for ``mismatch``: its leaf modules and the
    reduction lengths of its convolutions and linear layers, combined in quadrature (see the policy).
    ``functional``: the lengths of functional calls (``F.linear``), which are no modules. For gradients,
    ``backward_of`` is the input's shape: each such layer's weight gradient sums over at most the batch's
    pixels, N*H*W, its input gradient over its outputs' terms. ``steps`` training steps, each a forward and
    a backward pass, add their errors."""
    import torch

    leaves = [m for m in module.modules() if not list(m.children())]
    pixels = math.prod(backward_of) // backward_of[1] if backward_of is not None else 0
    lengths = list(functional)
    for layer in leaves:
        if isinstance(layer, torch.nn.Conv2d):
            kernel = math.prod(layer.kernel_size)
            lengths.append(layer.in_channels // layer.groups * kernel + 1)
            backward = [pixels, layer.out_channels // layer.groups * kernel]
        elif isinstance(layer, torch.nn.Linear):
            lengths.append(layer.in_features + 1)
            backward = [pixels, layer.out_features]
        else:
            continue
        lengths += backward if backward_of is not None else []
    layers = steps * (len(leaves) + len(functional)) * (2 if backward_of is not None else 1)
    squares = steps * sum(n * n for n in lengths)
    return {"layers": max(math.isqrt(layers - 1) + 1, 1), "reduction_length": max(math.isqrt(max(squares - 1, 0)) + 1, 1)}


def as_float64(value: Any) -> np.ndarray:
    """A float64 numpy copy of an array, a torch tensor (of any float dtype) or a scalar."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        value = value.double() if value.is_floating_point() else value
        value = value.numpy()
    return np.asarray(value, dtype=np.float64)


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref||, computed in float64 (a zero ``ref`` divides by the smallest float64 instead).
    For checks, use ``assert_close``: it knows which scale and which bound apply."""
    out, ref = as_float64(out), as_float64(ref)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))


def mismatch(out: Any, ref: Any, *, dtype: Any = None, reduction_length: int = 1, scale: Any = None,
             ref_dtype: Any = None, accumulate: Any = None, layers: int = 1) -> str:
    """Why ``out`` is not ``ref`` under the policy above ("" when it is). ``dtype``: the precision
    ``out`` was computed in (default: its dtype); ``ref_dtype`` likewise for ``ref``; ``scale``: the
    elementwise magnitude of the terms (default: ``ref``), or one number, its norm."""
    name, ref_name = dtype_name(dtype if dtype is not None else out), dtype_name(ref_dtype if ref_dtype is not None else ref)
    got, want = as_float64(out), as_float64(ref)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    problem = _nonfinite_mismatch(got, want)
    if problem:
        return problem
    finite = np.isfinite(want)
    bound = comparison_bound(name, ref_name, reduction_length, accumulate, layers)
    norm = _scale_norm(want if scale is None else scale, finite)
    difference = float(np.linalg.norm(got[finite] - want[finite]))
    if difference <= bound * norm:
        return ""
    error = difference / norm if norm > 0 else math.inf
    against = "its own norm" if scale is None else f"the scale of its terms (norm {norm:.3g}; the result's norm is {np.linalg.norm(want[finite]):.3g})"
    return (f"relative error {error:.3g} > bound {bound:.3g} = {SAFETY:g}*(L*u + n*u_acc) for {name} "
            f"(L = {layers}, n = {reduction_length}{f', reference in {ref_name}' if tolerance(ref_name) else ''}), "
            f"measured against {against}; largest difference {np.max(np.abs(got - want), initial=0, where=finite):.3g}")


def _nonfinite_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    lost, made = np.argwhere(np.isnan(want) & ~np.isnan(got)), np.argwhere(np.isnan(got) & ~np.isnan(want))
    if len(lost) or len(made):
        return f"NaN expected at {lost[:5].tolist()} and not there, NaN at {made[:5].tolist()} not expected"
    inf = np.isinf(want) | np.isinf(got)
    if not np.array_equal(got[inf], want[inf]):
        return f"infinities differ at {np.argwhere(inf & (got != want))[:5].tolist()}"
    return ""


def _scale_norm(scale: Any, finite: np.ndarray) -> float:
    if isinstance(scale, (int, float)):
        return abs(float(scale))  # one number: the norm itself
    values = np.abs(np.broadcast_to(as_float64(scale), finite.shape))
    return float(np.linalg.norm(values[finite]))


def central_difference(phi: Any, step: float, rounding: float) -> tuple[float, float]:
    """phi'(0) by the central difference D(h), and a bound on its error, for a scalar function ``phi`` of
    the step whose evaluations are each off by at most ``rounding``: rounding / h, plus the truncation
    error estimated from D(2h) (Richardson: D(2h) - D(h) is three times it), plus
    |phi(h) - 2 phi(0) + phi(-h)| / 2h, exactly the error a kink of a piecewise-linear function (relu, a
    max-pooling tie) inside [-h, h] causes, and about h*phi''/2 for a smooth one."""
    at = {t: float(phi(t)) for t in (0.0, step, -step, 2 * step, -2 * step)}
    central, wide = (at[step] - at[-step]) / (2 * step), (at[2 * step] - at[-2 * step]) / (4 * step)
    kink = abs(at[step] - 2 * at[0.0] + at[-step]) / (2 * step)
    return central, rounding / step + abs(wide - central) + kink
