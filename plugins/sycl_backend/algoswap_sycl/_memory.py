"""USM, the memory space of SYCL device arrays (SyclArray), for a core that keeps values on the device.

Not declared by the backend yet: the core selects only host-memory backends for CPU tensors in
swap_conv2d and Model steps. Every kernel already takes SyclArrays and then returns SyclArrays.
"""

from __future__ import annotations

from algoswap import MemorySpace

USM = MemorySpace(
    "sycl",
    "algoswap_sycl.SyclArray",
    to_host="algoswap_sycl._device:to_host",
    from_host="algoswap_sycl._device:from_host",
    description="SYCL USM (shared) allocations on the selected device, C-contiguous",
)
