"""The SYCL backend of algoswap: OpenCL C kernels built at run time through dpctl on any SYCL device
with an OpenCL backend (here: the CPU device of Intel's OpenCL runtime, from PyPI).

Implementations are registered as "module:attribute" strings, so discovery imports neither dpctl nor
numpy; the availability probe imports dpctl (after setting OCL_ICD_FILENAMES, if unset) and opens the
device named by ALGOSWAP_SYCL_DEVICE or ``use_device()``, else dpctl's default device. Programs are
built once per device and dtype, on first use.
"""

from __future__ import annotations

from typing import Any

from algoswap import ALL_DTYPES, Ref

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register", "use_device", "USM", "SyclArray"]

BACKEND = "sycl"
DTYPES = ("float32", "float64")  # float64 only where the device has it: supports() says so otherwise
ANY_DTYPE = tuple(dtype for dtype in ALL_DTYPES if dtype != "bfloat16")  # OpenCL C has no bfloat16
SUPPORTS = f"{__name__}._launch:supports_dtype_and_size"


def use_device(name: str | None) -> None:
    """Run on the SYCL device of this dpctl filter string ("opencl:cpu:0", "gpu", ...); None: back to
    ALGOSWAP_SYCL_DEVICE, else dpctl's default device."""
    from ._device import use_device as choose

    choose(name)


def __getattr__(name: str) -> Any:
    if name == "USM":
        from ._memory import USM

        return USM
    if name == "SyclArray":
        from ._device import SyclArray

        return SyclArray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def algoswap_api_version() -> str:
    return ">=1.1,<2"  # add_family


def probe() -> Any:
    """True (naming the device, for `algoswap backends`) if dpctl finds an OpenCL SYCL device, else why not."""
    from algoswap import Available

    from ._device import context, probe as check

    answer = check()
    return Available(f"sycl {context().filter_string}") if answer is True else answer


def algoswap_register(registry: Any) -> None:
    from ._memory import USM

    registry.add_backend(BACKEND, device="sycl", memory=USM, priority=-10, probe=probe,
                         description="OpenCL C kernels through dpctl on a SYCL device (USM; host arrays copied in)")
    _register_conv(registry)
    _register_families(registry)


def _register_conv(registry: Any) -> None:
    """conv2d and conv2d_fused, by algorithm (their gradients are in the conv family)."""
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    for op, suffix, then in (("conv2d", "", ""), ("conv2d_fused", "_fused", ", then the residual and relu in one pass")):
        supports = f"{conv}:supports_fused" if suffix else SUPPORTS
        add(op, "smm", BACKEND, f"{conv}:conv2d_smm{suffix}", dtypes=DTYPES, priority=10, supports=supports,
            kernel=Ref(f"{conv}:kernel{suffix}"), description="im2col in panels + the tiled matrix product" + then)
        add(op, "direct", BACKEND, f"{conv}:conv2d_direct{suffix}", dtypes=DTYPES, priority=20, supports=supports,
            kernel=Ref(f"{conv}:kernel_direct{suffix}"),
            description="the tiled matrix product reading the padded input in place (no im2col)" + then)


# family -> the algorithm of its ops (each with the module's kernel(), checked by SUPPORTS)
_FAMILIES = {"conv": "smm", "linear": "gemm", "pool": "direct", "activation": "direct", "elementwise": "direct"}
# op -> how it differs from its family's defaults
_OPS = {"conv2d_grad_bias": {"algorithm": "direct"}, "linear_grad_bias": {"algorithm": "direct"},
        "add": {"supports": f"{__name__}.elementwise:supports_add"}}


def _register_families(registry: Any) -> None:
    for family, algorithm in _FAMILIES.items():
        module = f"{__name__}.{family}"
        registry.add_family(module, BACKEND, algorithm=algorithm, dtypes=DTYPES, supports=SUPPORTS,
                            kernel=Ref(f"{module}:kernel"), overrides=_OPS)
    registry.add_family(f"{__name__}.shape", BACKEND, dtypes=ANY_DTYPE, kernel="a reshape of the same memory (no kernel)")
