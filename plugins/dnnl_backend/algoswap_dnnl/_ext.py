"""Loads the compiled extension. Imported only by the op modules, on first use of an implementation:
discovery and registration never load oneDNN."""

from __future__ import annotations

import ctypes
from typing import Callable, Iterable, Sequence

from algoswap import declare_cache


def _preload_libdnnl() -> None:
    """Load libdnnl.so.3 from the onednn-cpu-gomp distribution, wherever it is installed (editable
    installs and unusual prefixes, where the extension's RPATH does not lead to it)."""
    from importlib import metadata

    dist = metadata.distribution("onednn-cpu-gomp")
    for file in dist.files or ():
        if file.name == "libdnnl.so.3":
            ctypes.CDLL(str(dist.locate_file(file)), mode=ctypes.RTLD_GLOBAL)
            return
    raise ImportError("onednn-cpu-gomp is installed without libdnnl.so.3")


try:
    from . import _dnnl as dnnl
except ImportError as exc:
    if "libdnnl" not in str(exc):
        raise
    _preload_libdnnl()
    from . import _dnnl as dnnl


PLANS = declare_cache(
    "dnnl_plans", 1024,
    "oneDNN: plans (a primitive with the reorders around it), one per op, shapes, attributes and layout; below "
    "them oneDNN keeps its own primitive cache (ONEDNN_PRIMITIVE_CACHE_CAPACITY, 1024 by default)")
BRGEMM_ELTWISE = declare_cache(
    "dnnl_brgemm_eltwise", 512,
    "oneDNN 3.2: brgemm convolutions made with an activation post-op over the process's life (oneDNN keeps each "
    "one's JIT kernels, 30-70 KB, until the process ends); past this many, such convolutions are made without it "
    "and the activation runs after them, in place (kernel name '... + eltwise')")
IDLE_BUFFERS = declare_cache(
    "dnnl_idle_buffer_mib", 1024,
    "oneDNN: MiB (not entries) of output buffers of 1 MiB and more kept for reuse by outputs of the same size, "
    "the least recently released freed first")
for _kind in (PLANS, BRGEMM_ELTWISE, IDLE_BUFFERS):
    dnnl.use_cache_kind(_kind)


MAX_DIMS = 12  # DNNL_MAX_NDIMS of oneDNN 3.2: the most dimensions a memory descriptor has


def too_many_dims(shapes: Iterable[Sequence[int] | None]) -> str:
    """Why oneDNN cannot describe arrays of these shapes as they are ("" when it can)."""
    rank = max((len(shape) for shape in shapes if shape is not None), default=0)
    if rank <= MAX_DIMS:
        return ""
    return f"oneDNN 3.2 describes arrays of at most {MAX_DIMS} dimensions (DNNL_MAX_NDIMS); this call has a {rank}-D one"


def refusal(make_plan: Callable[[], object], dtype: str = "float32") -> bool | str:
    """True if oneDNN makes (and caches) the primitive, else its refusal as a reason. A bfloat16
    primitive must also have a real kernel: oneDNN's reference one means this CPU lacks bf16."""
    try:
        plan = make_plan()
    except (RuntimeError, ValueError) as exc:
        return str(exc)
    impl = str(getattr(plan, "impl", ""))
    if dtype == "bfloat16" and impl.startswith("ref"):
        return f"this CPU has no bfloat16 kernel for it (oneDNN offers only its reference implementation, {impl})"
    return True


__all__ = ["BRGEMM_ELTWISE", "IDLE_BUFFERS", "MAX_DIMS", "PLANS", "dnnl", "refusal", "too_many_dims"]
