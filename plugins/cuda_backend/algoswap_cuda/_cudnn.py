"""Convolution graphs on cuDNN through NVIDIA's cuDNN frontend (module ``cudnn``).

A plan is one graph (fprop, dgrad or wgrad of one layer geometry) with one engine built, cached per
geometry, engine and TF32 setting. A named algorithm builds the cuDNN engine its legacy algorithm
became (``ENGINES``, read off the engines' numerical notes and workspaces: README, "CUDA backend");
``guess`` walks cuDNN's heuristic ranking and builds the first engine that qualifies; ``find`` times
the first sixteen that qualify and the legacy FFT and Winograd engines, and keeps the fastest (as
cudnnFind and torch's cudnn.benchmark do).
Without TF32, engines with the TENSOR_CORE or DOWN_CONVERT_INPUTS note do not qualify for float32.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import cudnn
import cupy as cp

from algoswap import LRUCache, declare_cache

from . import ENGINES, _exact, _pointwise, _runtime
from ._pointwise import GRAPH_ACTIVATIONS, Epilogue

__all__ = ["GRAPH_ACTIVATIONS", "Epilogue", "Geometry", "NotServed", "Plan", "plan"]

Shape = tuple[int, ...]

# Engines whose results turn NaN and inf into -FLT_MAX (measured on the H200, cuDNN 9.19: winograd_nonfused
# gave -3.4e38 wherever torch's float64 convolution has NaN or ±inf). A plan of one scans its two
# operands first (one device reduction each, and a read back) and runs implicit_gemm on non-finite data.
SATURATING_ENGINES = frozenset({ENGINES["winograd_nonfused"]})
SATURATION_FALLBACK = ("implicit_gemm", "implicit_precomp_gemm", "gemm")
PROBED = 8  # guess: how many of cuDNN's ranked plans are probed for the infinities they keep (float16 forward)
# What an engine must carry (cuDNN numerical notes) to be the algorithm it is named for.
EXPECTED_NOTE = {"fft": "FFT", "fft_tiling": "FFT", "winograd": "WINOGRAD", "winograd_nonfused": "WINOGRAD"}
TF32_NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS")
_DTYPES = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16", "float64": "DOUBLE"}


@dataclass(frozen=True)
class Geometry:
    """One convolution as cuDNN sees it: direction, the three shapes, and the window."""

    kind: str  # "fprop", "dgrad" or "wgrad"
    x: Shape
    w: Shape
    y: Shape
    stride: tuple[int, int]
    pre: tuple[int, int]
    post: tuple[int, int]
    dilation: tuple[int, int]
    dtype: str = "float32"
    channels_last: bool = False  # x, w and y in NHWC (KRSC) memory order, else NCHW (KCRS)
    epilogue: Epilogue | None = None  # fprop only


def layout_strides(shape: Shape, channels_last: bool) -> list[int]:
    """The strides (in elements) of a dense 4-D array of ``shape`` (N, C, H, W) in NCHW or NHWC memory order."""
    if not channels_last:
        return _strides(shape)
    n, c, h, w = shape
    return [h * w * c, 1, w * c, c]


class NotServed(Exception):
    """cuDNN has no engine (of the requested kind) for this geometry."""


@dataclass
class Plan:
    """A built execution plan: run(a, b, out) launches it on the null stream."""

    geometry: Geometry
    engine: int
    name: str
    workspace: int
    run: Callable[..., None]  # (a, b, out, then bias and residual where the epilogue has them)
    tf32_allowed: bool = False
    loses_infinities: bool = False  # a float16 forward plan whose probe found infinities lost (_exact.keeps_infinities)

    @property
    def tf32(self) -> bool:
        """Whether this float32 plan may run on TF32 tensor cores."""
        return self.geometry.dtype == "float32" and self.tf32_allowed

    @property
    def label(self) -> str:
        scan = (f"; NaN/inf in an operand runs {SATURATION_FALLBACK[0]} instead (this engine saturates them)"
                if self.engine in SATURATING_ENGINES else "")
        g = self.geometry
        what = [g.dtype, "NHWC" if g.channels_last else "NCHW"] + (["TF32"] if self.tf32 else [])
        graph = f"one graph: conv + {g.epilogue.words}, " if g.epilogue else ""
        lost = "; loses infinities: a kernel after each call recomputes where an operand holds NaN or inf" * self.loses_infinities
        return (f"cuDNN {cudnn.backend_version()} {self.name} ({graph}engine {self.engine}, {', '.join(what)}, "
                f"workspace {self.workspace} B{scan}{lost})")


_lock = threading.RLock()  # find builds the legacy plans through plan() while holding it
PLANS = declare_cache("cuda_plans", 1024, "CUDA: built cuDNN plans (or why none builds), per layer geometry, algorithm and TF32")
_plans: LRUCache[Plan | str] = LRUCache(PLANS)
_state: dict[str, Any] = {}


def handle() -> Any:
    if "handle" not in _state:
        _state["handle"] = cudnn.create_handle()
    return _state["handle"]


def workspace(size: int) -> int:
    """A device pointer to at least ``size`` bytes, shared by every plan (all run on one stream)."""
    buffer = _state.get("workspace")
    if size and (buffer is None or buffer.nbytes < size):
        buffer = _state["workspace"] = cp.empty(size, dtype=cp.uint8)
    return 0 if buffer is None else int(buffer.data.ptr)


def _strides(shape: Shape) -> list[int]:
    out: list[int] = []
    step = 1
    for size in reversed(shape):
        out.insert(0, step)
        step *= size
    return out


def _graph(g: Geometry, select_notes: tuple[str, ...] = ()) -> tuple[Any, tuple[Any, ...]]:
    dtype = getattr(cudnn.data_type, _DTYPES[g.dtype])
    compute = cudnn.data_type.DOUBLE if g.dtype == "float64" else cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=dtype, intermediate_data_type=compute, compute_data_type=compute, handle=handle())
    window = dict(pre_padding=list(g.pre), post_padding=list(g.post), stride=list(g.stride),
                  dilation=list(g.dilation), compute_data_type=compute)

    def tensor(name: str, shape: Shape) -> Any:
        return graph.tensor(name=name, dim=list(shape), stride=layout_strides(shape, g.channels_last), data_type=dtype)

    if g.kind == "fprop":
        a, b = tensor("x", g.x), tensor("w", g.w)
        out, shape = graph.conv_fprop(image=a, weight=b, **window), g.y
    elif g.kind == "dgrad":
        a, b = tensor("dy", g.y), tensor("w", g.w)
        out, shape = graph.conv_dgrad(loss=a, filter=b, **window), g.x
    else:
        a, b = tensor("x", g.x), tensor("dy", g.y)
        out, shape = graph.conv_wgrad(image=a, loss=b, **window), g.w
    out, extra = _pointwise.nodes(graph, g.epilogue, out, g.y[1], dtype, lambda name: tensor(name, g.y), compute)
    out.set_output(True).set_dim(list(shape)).set_stride(layout_strides(shape, g.channels_last)).set_data_type(dtype)
    for note in select_notes:
        graph.select_numeric_notes([getattr(cudnn.numerical_note, note)])
    graph.validate()
    graph.build_operation_graph()
    return graph, (a, b, out, *extra)


NOTES = ("FFT", "WINOGRAD", "TENSOR_CORE", "DOWN_CONVERT_INPUTS")
_NOT_YET = object()
NOTES_CACHE = declare_cache("cuda_engine_notes", 4096, "CUDA: the numerical notes of each cuDNN engine, per layer geometry")
_notes: LRUCache[frozenset[str] | None] = LRUCache(NOTES_CACHE)


def _builds(g: Geometry, engine: int, select_notes: tuple[str, ...] = ()) -> bool:
    try:
        graph, _ = _graph(g, select_notes)
        graph.create_execution_plan(engine, {})
        graph.build_plan_at_index(graph.get_execution_plan_count() - 1)
    except Exception:  # noqa: BLE001 - a refusal is the answer
        return False
    return True


def notes(g: Geometry, engine: int) -> frozenset[str] | None:
    """The numerical notes cuDNN gives ``engine`` for ``g`` (of NOTES), None if it does not build.

    Read the one way the frontend offers: a graph told to keep only engines with a note builds the
    engine exactly when the engine has it. Notes belong to the engine, not to its knob settings."""
    key = (g, engine)
    found: Any = _notes.get(key, _NOT_YET)
    if found is _NOT_YET:
        found = _notes.put(key, frozenset(n for n in NOTES if _builds(g, engine, (n,))) if _builds(g, engine) else None)
    return found  # type: ignore[no-any-return]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _finish(g: Geometry, graph: Any, tensors: tuple[Any, ...], index: int, engine: int, tf32: bool = False) -> Plan:
    size = int(graph.get_workspace_size_plan_at_index(index))
    name = str(graph.get_plan_name_at_index(index))
    uids = [t.uid for t in tensors]
    raw, lowered = handle().backend_handle, getattr(graph, "_lowered_graph", None)
    cpp_index = getattr(graph.plans[index], "cpp_index", None) if hasattr(graph, "plans") else None

    if lowered is not None and cpp_index is not None and hasattr(lowered, "_execute_plan_at_index"):
        # the frontend's own backend call without its per-call argument normalisation (~25 us less)
        def run(*arrays: Any) -> None:
            pack = {uid: aligned(array, i).data.ptr for i, (uid, array) in enumerate(zip(uids, arrays))}
            lowered._execute_plan_at_index(pack, workspace(size), cpp_index, raw)
    else:
        def run(*arrays: Any) -> None:
            pack = {tensor: aligned(array, i).data.ptr for i, (tensor, array) in enumerate(zip(tensors, arrays))}
            graph.execute_plan_at_index(pack, workspace(size), index, handle())

    run = _exact_on_non_finite(g, run) if engine in SATURATING_ENGINES else run
    return Plan(g, engine, name, size, run, tf32)


OUTPUT = 2  # the position of a plan's output among its arrays: (x, w, y), (dy, w, dx), (x, dy, dw), then extras


def aligned(array: Any, position: int) -> Any:
    """An input ``array``, or a copy in its memory order where it does not start on a 16-byte boundary (a view at
    an offset, such as a parameter sliced from a larger storage): cuDNN's engines refuse such pointers
    (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER). The output is passed as it is (our own allocation: a copy would
    drop what cuDNN writes; were it misaligned, cuDNN's refusal is the error)."""
    return array if position == OUTPUT or array.data.ptr % 16 == 0 else array.copy(order="K")


def _exact_on_non_finite(g: Geometry, run: Callable[..., None]) -> Callable[..., None]:
    def scanned(a: Any, b: Any, *rest: Any) -> None:
        if bool(cp.isfinite(a).all()) and bool(cp.isfinite(b).all()):
            run(a, b, *rest)
        else:
            _exact_plan(g).run(a, b, *rest)
    return scanned


def _exact_plan(g: Geometry) -> Plan:
    for name in SATURATION_FALLBACK:
        try:
            return plan(g, name)
        except NotServed:
            continue
    raise NotServed(f"none of {', '.join(SATURATION_FALLBACK)} builds for this {g.kind} layer, which has NaN or inf "
                    "in an operand (its engine would saturate them)")


def _engine_id(name: str) -> int:
    """The engine index in a plan name such as "eng38_k2=1_k13=0"."""
    head = name.split("_")[0]
    return int(head[3:]) if head.startswith("eng") and head[3:].isdigit() else -1


def _named(g: Geometry, algorithm: str, probe: bool = True) -> Plan:
    engine = ENGINES[algorithm]
    try:
        graph, tensors = _graph(g)
        graph.create_execution_plan(engine, {})
        index = graph.get_execution_plan_count() - 1
        graph.build_plan_at_index(index)
    except Exception as exc:  # noqa: BLE001 - a refusal is the reason the algorithm does not apply
        raise NotServed(f"cuDNN has no engine {engine} ({algorithm}) for this {g.kind} layer: {_first_line(exc)}") from None
    plan = _finish(g, graph, tensors, index, engine)
    if _engine_id(plan.name) != engine:
        raise NotServed(f"cuDNN built {plan.name} when asked for engine {engine} ({algorithm})")
    plan.loses_infinities = probe and _exact.probed(g) and not _exact.kept(plan)
    return plan


def _qualifies(g: Geometry, engine: int, tf32: bool) -> bool:
    if not 0 <= engine < 10_000:  # only cuDNN's own engines (the frontend's Python engines are others)
        return False
    if tf32 or g.dtype != "float32":
        return True  # the half precisions run on tensor cores (accumulating in float32) whatever TF32 says
    found = notes(g, engine)
    return found is not None and not found & set(TF32_NOTES)


def _ranked(g: Geometry) -> tuple[Any, tuple[Any, Any, Any], int]:
    try:
        graph, tensors = _graph(g)
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return graph, tensors, graph.get_execution_plan_count()
    except Exception as exc:  # noqa: BLE001
        raise NotServed(f"cuDNN's heuristics offer no engine for this {g.kind} layer: {_first_line(exc)}") from None


def _candidates(g: Geometry, graph: Any, count: int, tf32: bool, limit: int) -> Iterator[tuple[int, int]]:
    """(index, engine) of the first ``limit`` ranked plans that qualify and build."""
    found = 0
    for index in range(count):
        if found == limit:
            return
        try:
            engine = int(graph.get_engine_and_knobs_at_index(index)[0])
            if not _qualifies(g, engine, tf32):
                continue
            graph.build_plan_at_index(index)
        except Exception:  # noqa: BLE001 - try the next in cuDNN's ranking
            continue
        found += 1
        yield index, engine


def _guess(g: Geometry, tf32: bool) -> Plan:
    """cuDNN's first ranked plan that builds; for a probed geometry, the first of PROBED that keeps infinities,
    else the first named fallback that does, else the first, marked."""
    graph, tensors, count = _ranked(g)
    ranked = (_finish(g, graph, tensors, index, engine, tf32)
              for index, engine in _candidates(g, graph, count, tf32, PROBED if _exact.probed(g) else 1))
    if not _exact.probed(g):
        found = next(ranked, None)
    else:
        found = _exact.first_keeping(itertools.chain(ranked, _fallbacks(g)))
    if found is None:
        raise NotServed(f"none of cuDNN's {count} ranked engines for this {g.kind} layer builds"
                        f"{'' if tf32 else ' without TF32 tensor cores (TF32 is off)'}")
    return found


def _fallbacks(g: Geometry) -> Iterator[Plan]:
    """The named engines of SATURATION_FALLBACK that build for ``g``."""
    for name in SATURATION_FALLBACK:
        try:
            yield _named(g, name, probe=False)
        except NotServed:
            continue


def _legacy(g: Geometry) -> Iterator[Plan]:
    """The plans of the legacy FFT and Winograd engines, which cuDNN's ranking often leaves out
    (Winograd for 3x3 filters only: see conv.WINOGRAD_REASON)."""
    names = ["fft", "fft_tiling"] + (["winograd_nonfused"] if g.w[2:] == (3, 3) else [])
    for name in names:
        try:
            yield plan(g, name)
        except NotServed:
            continue


def _find(g: Geometry, tf32: bool, limit: int = 16) -> Plan:
    """Time the first ``limit`` qualifying plans of cuDNN's ranking and the legacy FFT and Winograd
    engines on random data; keep the fastest (for a probed geometry, the fastest that keeps infinities)."""
    graph, tensors, count = _ranked(g)
    shapes: tuple[Shape, ...] = {"fprop": (g.x, g.w, g.y), "dgrad": (g.y, g.w, g.x), "wgrad": (g.x, g.y, g.w)}[g.kind]
    rng = cp.random.default_rng(0)
    if g.epilogue is not None:
        shapes += ((1, g.y[1], 1, 1),) * g.epilogue.bias + (g.y,) * g.epilogue.residual
    arrays = [random_array(rng, shape, g) for shape in shapes]
    timings = []
    ranked = (_finish(g, graph, tensors, index, engine, tf32) for index, engine in _candidates(g, graph, count, tf32, limit))
    for plan in itertools.chain(ranked, _legacy(g)):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        plan.run(*arrays)
        start.record()
        for _ in range(5):
            plan.run(*arrays)
        stop.record()
        stop.synchronize()
        timings.append((cp.cuda.get_elapsed_time(start, stop), plan.engine, plan))
    if not timings:
        raise NotServed(f"none of cuDNN's {count} ranked engines for this {g.kind} layer builds"
                        f"{'' if tf32 else ' without TF32 tensor cores (TF32 is off)'}")
    fastest = [plan for _, _, plan in sorted(timings, key=lambda t: t[0])]
    return _exact.first_keeping(fastest) if _exact.probed(g) else fastest[0]


def random_array(rng: Any, shape: Shape, g: Geometry) -> Any:
    """Standard normal values of ``g``'s dtype, in its memory order (for timing plans)."""
    values = rng.standard_normal(shape, dtype=cp.float64).astype(g.dtype)
    return _runtime.channels_last(values) if g.channels_last and len(shape) == 4 else values


def plan(g: Geometry, algorithm: str) -> Plan:
    """The built plan of ``algorithm`` ("guess", "find" or a name in ENGINES) for ``g``; NotServed if none."""
    tf32 = _runtime.tf32("conv") and g.dtype == "float32"
    key = (g, algorithm, tf32)
    found = _plans.get(key)
    if found is None:
        with _lock:
            try:
                choose = {"guess": _guess, "find": _find}.get(algorithm)
                found = choose(g, tf32) if choose else _named(g, algorithm)
            except NotServed as exc:
                found = str(exc)
            _plans.put(key, found)
    if isinstance(found, str):
        raise NotServed(found)
    return found


def plans_cached() -> int:
    return len(_plans)
