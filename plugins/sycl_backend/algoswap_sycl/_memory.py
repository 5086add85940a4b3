"""USM, the memory space of SYCL device arrays (SyclArray): the backend's memory.

Host arrays are accepted (``accepts_host``: the caller copies them into USM, as swap_conv2d does for
CPU tensors); a swap_backend Model keeps SyclArrays on the device between consecutive SYCL steps.
"""

from __future__ import annotations

from algoswap import MemorySpace

USM = MemorySpace(
    "sycl",
    "algoswap_sycl.SyclArray",
    to_host="algoswap_sycl._device:to_host",
    from_host="algoswap_sycl._device:from_host",
    description="SYCL USM (shared) allocations on the selected device, C-contiguous",
    accepts_host=True,
)
