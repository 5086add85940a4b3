"""scaled_dot_product_attention's forward as cuDNN's fused attention (the cuDNN frontend's ``sdpa`` graph: flash
attention for inference, no softmax statistics) in float16 and bfloat16, without a mask or with ``is_causal``
(top-left, as torch's). q, k and v are read with their strides, so a head split's transposed views need no
copy; the output is written in q's memory order, so merging the heads back is a view too. One plan per
geometry (cache kind ``cuda_sdpa_plans``), or why cuDNN has none: the caller then computes the spec's way
(``attention.py``). Only cuDNN's own engines are taken (the frontend's Python engines are others).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import cupy as cp

from algoswap import LRUCache, declare_cache
from ._runtime import dtype_name

Dims = tuple[int, int, int, int]
_ALIGN = 16  # bytes: cuDNN's attention kernels read every row and tensor start at this alignment
_STEP = _ALIGN // 2  # in elements of float16 and bfloat16
_IO = {"float16": "HALF", "bfloat16": "BFLOAT16"}
DTYPES = tuple(_IO)


@dataclass(frozen=True)
class Geometry:
    """One attention call as cuDNN sees it: (B, H, L or S, E) dims and strides in elements of q, k, v and out."""

    dtype: str
    q: Dims
    k: Dims
    v: Dims
    strides: tuple[Dims, Dims, Dims, Dims]
    causal: bool
    scale: float

    @property
    def out(self) -> Dims:
        return self.q[0], self.q[1], self.q[2], self.v[3]


@dataclass
class Plan:
    """A built plan: ``run(q, k, v, out)`` launches it on cuDNN's stream."""

    geometry: Geometry
    name: str
    engine: int
    workspace: int
    run: Callable[..., None]

    @property
    def label(self) -> str:
        import cudnn

        g = self.geometry
        causal = ", causal" if g.causal else ""
        return (f"cuDNN {cudnn.backend_version()} fused attention ({self.name}, engine {self.engine}, {g.dtype}, flash, "
                f"inference: no statistics{causal}; q, k, v read with their strides; workspace {self.workspace} B)")


PLANS = declare_cache("cuda_sdpa_plans", 256, "CUDA: built cuDNN fused-attention plans (or why none builds), per geometry")
_plans: LRUCache[Plan | str] = LRUCache(PLANS)
_lock = threading.Lock()


def layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[Dims, Dims] | None:
    """(B, H, rows, E) dims and strides in elements of a 3-D (B, rows, E) or 4-D array; None for other ranks."""
    if len(shape) == 4:
        return shape, strides  # type: ignore[return-value]
    if len(shape) == 3:
        return (shape[0], 1, shape[1], shape[2]), (strides[0], shape[1] * strides[1], strides[1], strides[2])
    return None


def _contiguous(shape: Dims) -> Dims:
    b, h, rows, e = shape
    return h * rows * e, rows * e, e, 1


def geometry(dtype: str, shapes: tuple[Any, Any, Any], strides: tuple[Any, Any, Any] | None, causal: bool,
             scale: float) -> Geometry | str:
    """The geometry of a call (``strides`` in elements; None: C-contiguous operands), its output in q's memory order;
    or why cuDNN's fused attention does not apply to it."""
    if dtype not in _IO:
        return f"{dtype} (cuDNN's fused attention takes float16 and bfloat16)"
    laid = [layout(tuple(shape), tuple(s) if s is not None else _row_major(tuple(shape)))
            for shape, s in zip(shapes, strides or (None, None, None))]
    if any(found is None for found in laid):
        return f"inputs of rank {len(shapes[0])} (3-D or 4-D are taken)"
    (q, qs), (k, ks), (v, vs) = laid  # type: ignore[misc]
    if not q[:2] == k[:2] == v[:2]:
        return f"batch dimensions that differ or broadcast (query {q[:2]}, key {k[:2]}, value {v[:2]})"
    if any(s[3] != 1 or any(step % _STEP for step in s[:3]) for s in (qs, ks, vs)):
        return f"strides {qs}, {ks}, {vs} (elements): every one but the last, 1, must be a multiple of {_STEP} (16 bytes)"
    return Geometry(dtype, q, k, v, (qs, ks, vs, _out_strides(q, v, qs)), causal, float(scale))


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    step = 1
    for size in reversed(shape):
        out.insert(0, step)
        step *= size
    return tuple(out)


def _heads_inner(q: Dims, qs: Dims) -> bool:
    """Whether q's heads lie inside its rows in memory (B, L, H, E: a head split's transposed view)."""
    return q[1] > 1 and q[2] > 1 and qs[1] < qs[2]


def _out_strides(q: Dims, v: Dims, qs: Dims) -> Dims:
    b, h, rows, e = q[0], q[1], q[2], v[3]
    return (rows * h * e, e, h * e, 1) if _heads_inner(q, qs) else _contiguous((b, h, rows, e))


def plan(g: Geometry) -> Plan:
    """The built plan for ``g``; NotServed if cuDNN has none."""
    found: Plan | str | None = _plans.get(g)
    if found is None:
        with _lock:
            try:
                found = _build(g)
            except Exception as exc:  # noqa: BLE001 - any refusal, the frontend's missing too, is the reason
                found = _why(exc)
            _plans.put(g, found)
    if isinstance(found, str):
        raise NotServed(found)
    return found


class NotServed(Exception):
    """cuDNN builds no fused attention for this geometry."""


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _build(g: Geometry) -> Plan | str:
    import cudnn

    from . import _cudnn

    io = getattr(cudnn.data_type, _IO[g.dtype])
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=_cudnn.handle())
    q, k, v = (graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=io)
               for name, dims, strides in zip("qkv", (g.q, g.k, g.v), g.strides))
    options = {"name": "sdpa", "q": q, "k": k, "v": v, "attn_scale": g.scale, "use_causal_mask": g.causal}
    try:
        out, _ = graph.sdpa(generate_stats=False, **options)
    except TypeError:  # frontends before generate_stats
        out, _ = graph.sdpa(is_inference=True, **options)
    out.set_output(True).set_dim(list(g.out)).set_stride(list(g.strides[3])).set_data_type(io)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    tensors = (q, k, v, out)
    for index in range(graph.get_execution_plan_count()):
        engine = int(graph.get_engine_and_knobs_at_index(index)[0])
        if not 0 <= engine < 10_000:
            continue
        try:
            graph.build_plan_at_index(index)
        except Exception:  # noqa: BLE001 - the next in cuDNN's ranking
            continue
        size = int(graph.get_workspace_size_plan_at_index(index))
        return Plan(g, str(graph.get_plan_name_at_index(index)), engine, size, _launcher(graph, tensors, index, size))
    return f"none of cuDNN's {graph.get_execution_plan_count()} ranked fused-attention plans builds for this call"


def _launcher(graph: Any, tensors: tuple[Any, ...], index: int, size: int) -> Callable[..., None]:
    """``run(q, k, v, out)``: the plan at ``index`` on the shared cuDNN handle and workspace, through the frontend's
    backend call where it has one (no per-call argument normalisation), else its ``execute_plan_at_index``."""
    from . import _cudnn

    lowered = getattr(graph, "_lowered_graph", None)
    cpp_index = getattr(graph.plans[index], "cpp_index", None) if hasattr(graph, "plans") else None
    uids, raw = [t.uid for t in tensors], _cudnn.handle().backend_handle
    if lowered is None or cpp_index is None or not hasattr(lowered, "_execute_plan_at_index"):
        return lambda *arrays: graph.execute_plan_at_index({t: a.data.ptr for t, a in zip(tensors, arrays)},
                                                           _cudnn.workspace(size), index, _cudnn.handle())
    return lambda *arrays: lowered._execute_plan_at_index({u: a.data.ptr for u, a in zip(uids, arrays)},
                                                          _cudnn.workspace(size), cpp_index, raw)


def _readable(a: Any) -> bool:
    """Whether cuDNN can read ``a`` where it is: its start and every stride but the last 16-byte aligned."""
    return a.data.ptr % _ALIGN == 0 and a.strides[-1] == a.itemsize and all(s % _ALIGN == 0 for s in a.strides[:-1])


def forward(q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any | None:
    """softmax(scale * q @ k^T) @ v (causal: key j <= query i) on cuDNN; None where it has no plan for the call."""
    arrays = tuple(a if _readable(a) else a.copy(order="C") for a in (q, k, v))
    strides = tuple(tuple(s // a.itemsize for s in a.strides) for a in arrays)
    g = geometry(dtype_name(q.dtype), tuple(a.shape for a in arrays), strides, causal, scale)  # type: ignore[arg-type]
    if isinstance(g, str):
        return None
    try:
        found = plan(g)
    except NotServed:
        if all(a.flags.c_contiguous for a in arrays):
            return None
        q, k, v = (a.copy(order="C") for a in arrays)
        return forward(q, k, v, causal, scale)  # the plan the kernel string names
    out = _output(q, v, g)
    found.run(*arrays, out)
    return out


def _output(q: Any, v: Any, g: Geometry) -> Any:
    """A new array of the spec's output shape (q's with v's last size), laid out as ``g`` writes it."""
    shape = q.shape[:-1] + (v.shape[-1],)
    if not _heads_inner(g.q, g.strides[0]):
        return cp.empty(shape, q.dtype)
    b, h, rows, e = g.out
    return cp.empty((b, rows, h, e), q.dtype).transpose(0, 2, 1, 3)


def refusal(dtype: str, shapes: tuple[Any, Any, Any], causal: bool, scale: float) -> str:
    """Why a call with C-contiguous operands of these shapes does not run on cuDNN's fused attention ("" if it does)."""
    g = geometry(dtype, shapes, None, causal, scale)
    if isinstance(g, str):
        return g
    try:
        plan(g)
    except NotServed as exc:
        return str(exc)
    return ""


def label(dtype: str, shapes: tuple[Any, Any, Any], causal: bool, scale: float) -> str:
    g = geometry(dtype, shapes, None, causal, scale)
    assert not isinstance(g, str)
    return plan(g).label

