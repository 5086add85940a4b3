"""Communication backends of algoswap on torch.distributed: ``gloo`` (host numpy arrays) and ``nccl``
(CuPy arrays in GPU memory, shared with torch through DLPack: no copies).

Both implement the core's ``comm`` family for the groups ``algoswap.dist`` sets up (``init()``,
``new_group()``); each call's group must exist and have the size the call was bound with. Registration
imports neither torch nor CuPy: implementations are "module:attribute" strings, imported on first use.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from algoswap import FAMILIES, FLOAT_DTYPES, HOST, MemorySpace

__version__ = "0.1.0"
__all__ = ["NCCL_MEMORY", "algoswap_api_version", "algoswap_register"]

# What gloo reduces and moves (torch 2.13: int16 and the unsigned types beyond uint8 are refused); NCCL the same.
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64")
# The CUDA backend's memory space (same name, same functions): NCCL reduces its arrays where they are.
NCCL_MEMORY = MemorySpace(
    "cuda", "cupy.ndarray", to_host="algoswap_cuda._runtime:to_host", from_host="algoswap_cuda._runtime:from_host",
    from_dlpack="algoswap_cuda._runtime:from_dlpack",
    description="C-contiguous CuPy arrays in the memory of the current CUDA device (algoswap-cuda's)",
)
_GRADIENTS = ("allreduce_grad", "broadcast_grad")
_LOCAL = ("shard_indices",)  # no communication: the reference serves it, in host memory
_KERNELS = {
    "allreduce": "all_reduce", "allreduce_grad": "all_reduce", "allreduce_start": "all_reduce (async_op)",
    "comm_wait": "Work.wait", "allgather": "all_gather", "reduce_scatter": "reduce_scatter_single",
    "broadcast": "broadcast", "broadcast_grad": "reduce", "all_to_all": "all_to_all_single",
    "sendrecv": "batch_isend_irecv",
}


def algoswap_api_version() -> str:
    return ">=1.2,<2"  # the comm family


def gloo_probe() -> bool | str:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install torch; its CPU build has gloo)"
    return True


def nccl_probe() -> bool | str:
    if importlib.util.find_spec("algoswap_cuda") is None:
        return "NCCL's arrays are the CUDA backend's: algoswap-cuda is not installed"
    from algoswap_cuda import _driver_missing

    missing = _driver_missing()
    if missing:
        return missing
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU (a CPU build of torch, or no device)"
    return True if dist.is_nccl_available() else "this torch build has no NCCL"


def in_group(call: Any) -> bool | str:
    """The call's group is set up here (``algoswap.dist``), has the size the call was bound with, and this rank
    is in it. Imports no torch: a process that sets up no group never imports it for selection."""
    from algoswap.dist import find_group

    name, size = call.attrs["group"], call.attrs["size"]
    group = find_group(name)
    if group is None:
        return f"group {name!r} is not set up in this process (algoswap.dist.init(), new_group())"
    if group.size != size:
        return f"group {name!r} has {group.size} ranks; the call was bound for {size}"
    if group.rank < 0:
        return f"this rank is not a member of group {name!r} (ranks {list(group.ranks)})"
    if call.attrs.get("reduction") == "mean" and call.dtype.startswith(("int", "uint")):
        return "a mean of integer arrays is not one: reduce with 'sum'"
    return True


def algoswap_register(registry: Any) -> None:
    registry.add_backend("gloo", device="cpu", memory=HOST, probe=f"{__name__}:gloo_probe", priority=10,
                         description="torch.distributed's gloo: collectives among processes on host arrays")
    registry.add_backend("nccl", device="cuda", memory=NCCL_MEMORY, probe=f"{__name__}:nccl_probe", priority=20,
                         description="torch.distributed's NCCL: collectives among GPUs on CuPy arrays, in place")
    for backend in ("gloo", "nccl"):
        for op in FAMILIES["comm"]:
            if op in _LOCAL:
                continue
            registry.add_implementation(
                op, "direct", backend, f"{__name__}.{backend}:{op}",
                dtypes=FLOAT_DTYPES if op in _GRADIENTS else DTYPES,
                supports=None if op == "comm_wait" else in_group,
                kernel=f"torch.distributed.{_KERNELS[op]} ({backend})",
            )
