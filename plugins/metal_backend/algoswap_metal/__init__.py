"""The Metal backends of algoswap, for Apple GPUs: ``mps`` (torch's ops on the mps device, MPSGraph underneath) and
``metal`` (our own Metal Shading Language kernels in kernels/*.metal, compiled at run time by
torch.mps.compile_shader). Both keep their arrays in one memory space, ``mps`` (MpsArray: torch tensors on the mps
device), so that a model's steps move between them without copies.

Implementations are registered as "module:attribute" strings: discovery imports neither torch nor the op modules.
On Linux and Windows the probes answer without importing torch: "needs macOS on Apple silicon with torch built
with MPS".
"""

from __future__ import annotations

from typing import Any

from algoswap import MemorySpace

from . import _probe

__version__ = "0.1.0"
__all__ = ["MPS", "MpsArray", "algoswap_api_version", "algoswap_register", "probe_metal", "probe_mps"]

MPS = MemorySpace("mps", f"{__name__}.MpsArray", to_host=f"{__name__}._device:to_host",
                  from_host=f"{__name__}._device:from_host", from_dlpack=f"{__name__}._device:from_torch",
                  description="contiguous torch tensors on the mps device (MpsArray)")
probe_mps = _probe.mps
probe_metal = _probe.metal
MPS_DTYPES = ("float16", "float32")  # what MPS computes in (no float64 on Apple GPUs)
ANY = ("bool", "float16", "float32", "int8", "int16", "int32", "int64", "uint8")
MPS_FAMILIES = ("conv", "linear", "pool", "activation", "elementwise", "norm", "softmax", "shape")
KERNELS = {"direct": "conv2d_direct (kernels/conv.metal): one thread per output, every padding mode read in place",
           "smm": "im2col (kernels/conv.metal) + gemm (kernels/gemm.metal): 32x32 tiles of 8x8 threads, 4x4 outputs "
                  "each, panels of both operands in threadgroup memory"}
EPILOGUE = ", then bias, residual and activation in its store"


def __getattr__(name: str) -> Any:
    if name == "MpsArray":
        from ._device import MpsArray

        return MpsArray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def algoswap_api_version() -> str:
    return ">=1.1,<2"  # add_family


def algoswap_register(registry: Any) -> None:
    registry.add_backend("mps", device="mps", memory=MPS, priority=20, probe=f"{__name__}:probe_mps",
                         description="torch's ops on the mps device (MPSGraph) on Apple GPUs")
    registry.add_backend("metal", device="mps", memory=MPS, priority=10, probe=f"{__name__}:probe_metal",
                         description="our Metal Shading Language kernels on Apple GPUs (torch.mps.compile_shader)")
    _register_mps(registry)
    _register_metal(registry)


def _register_mps(registry: Any) -> None:
    overrides: dict[str, dict[str, Any]] = {op: {"dtypes": ANY, "kernel": "torch on the mps device"}
                                            for op in ("flatten", "reshape", "concat")}
    overrides["conv2d"] = {"kernel": "F.pad where padded, then F.conv2d on the mps device (MPSGraph)"}
    overrides["conv2d_fused"] = {"kernel": "F.pad where padded, then F.conv2d, residual and activation on the mps device"}
    for family in MPS_FAMILIES:
        registry.add_family(f"{__name__}.mps.{family}", "mps", algorithm="mpsgraph", dtypes=MPS_DTYPES,
                            kernel="torch on the mps device (MPSGraph)", overrides=overrides)


def _register_metal(registry: Any) -> None:
    conv, size = f"{__name__}.metal.conv", f"{__name__}.metal._launch:supports_size"
    for algorithm, priority in (("smm", 20), ("direct", 10)):
        registry.add_implementation("conv2d", algorithm, "metal", f"{conv}:conv2d_{algorithm}", dtypes=("float32",),
                                    priority=priority, supports=size, kernel=KERNELS[algorithm])
        registry.add_implementation("conv2d_fused", algorithm, "metal", f"{conv}:conv2d_{algorithm}_fused",
                                    dtypes=("float32",), priority=priority, supports=f"{conv}:supports_fused",
                                    kernel=KERNELS[algorithm] + EPILOGUE)
    pool = f"{__name__}.metal.pool"
    registry.add_implementation("maxpool2d", "direct", "metal", f"{pool}:maxpool2d", dtypes=("float32",), supports=size,
                                kernel="maxpool2d (kernels/pool.metal): one thread per output")
    registry.add_implementation("adaptiveavgpool2d", "direct", "metal", f"{pool}:adaptiveavgpool2d", dtypes=("float32",),
                                supports=f"{pool}:supports_global",
                                kernel="global_avgpool (kernels/pool.metal): one SIMD-group per plane, simd_sum (output 1x1 only)")
    registry.add_implementation("relu", "direct", "metal", f"{__name__}.metal.activation:relu", dtypes=("float32",),
                                supports=size, kernel="relu (kernels/elementwise.metal): one thread per element")
    registry.add_implementation("add", "direct", "metal", f"{__name__}.metal.elementwise:add", dtypes=("float32",),
                                supports=f"{__name__}.metal.elementwise:supports_add",
                                kernel="add (kernels/elementwise.metal): one thread per element")
