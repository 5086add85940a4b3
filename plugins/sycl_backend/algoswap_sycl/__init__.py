"""The SYCL backend of algoswap: OpenCL C kernels built at run time through dpctl on any SYCL device
with an OpenCL backend (here: the CPU device of Intel's OpenCL runtime, from PyPI).

Implementations are registered as "module:attribute" strings, so discovery imports neither dpctl nor
numpy; the availability probe imports dpctl (after setting OCL_ICD_FILENAMES, if unset) and opens the
device named by ALGOSWAP_SYCL_DEVICE or ``use_device()``, else dpctl's default device. Programs are
built once per device and dtype, on first use.
"""

from __future__ import annotations

from typing import Any

from algoswap import Ref

__version__ = "0.1.0"
__all__ = ["algoswap_api_version", "algoswap_register", "use_device", "USM", "SyclArray"]

BACKEND = "sycl"
DTYPES = ("float32", "float64")  # float64 only where the device has it: supports() says so otherwise
ANY_DTYPE = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
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
    return ">=1,<2"


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
    _register_others(registry)


def _register_conv(registry: Any) -> None:
    add = registry.add_implementation
    conv = f"{__name__}.conv"
    for op, suffix, then in (("conv2d", "", ""), ("conv2d_fused", "_fused", ", then the residual and relu in one pass")):
        add(op, "smm", BACKEND, f"{conv}:conv2d_smm{suffix}", dtypes=DTYPES, priority=10, supports=SUPPORTS,
            kernel=Ref(f"{__name__}.conv:kernel{suffix}"), description="im2col in panels + the tiled matrix product" + then)
        add(op, "direct", BACKEND, f"{conv}:conv2d_direct{suffix}", dtypes=DTYPES, priority=20, supports=SUPPORTS,
            kernel=Ref(f"{__name__}.conv:kernel_direct{suffix}"),
            description="the tiled matrix product reading the padded input in place (no im2col)" + then)
    for op in ("conv2d_grad_input", "conv2d_grad_weight"):
        add(op, "smm", BACKEND, f"{conv}:{op}", dtypes=DTYPES, supports=SUPPORTS, kernel=Ref(f"{__name__}.conv:kernel"))
    add("conv2d_grad_bias", "direct", BACKEND, f"{conv}:conv2d_grad_bias", dtypes=DTYPES, supports=SUPPORTS,
        kernel=Ref(f"{__name__}.conv:kernel"))


def _register_others(registry: Any) -> None:
    add = registry.add_implementation
    for op in ("linear", "linear_grad_input", "linear_grad_weight"):
        add(op, "gemm", BACKEND, f"{__name__}.linear:{op}", dtypes=DTYPES, supports=SUPPORTS,
            kernel=Ref(f"{__name__}.linear:kernel"))
    add("linear_grad_bias", "direct", BACKEND, f"{__name__}.linear:linear_grad_bias", dtypes=DTYPES,
        supports=SUPPORTS, kernel=Ref(f"{__name__}.linear:kernel"))
    for op in ("maxpool2d", "maxpool2d_grad", "avgpool2d", "avgpool2d_grad", "adaptiveavgpool2d",
               "adaptiveavgpool2d_grad"):
        add(op, "direct", BACKEND, f"{__name__}.pool:{op}", dtypes=DTYPES, supports=SUPPORTS,
            kernel=Ref(f"{__name__}.pool:kernel"))
    for op in ("relu", "relu_grad"):
        add(op, "direct", BACKEND, f"{__name__}.activation:{op}", dtypes=DTYPES, supports=SUPPORTS,
            kernel=Ref(f"{__name__}.activation:kernel"))
    add("add", "direct", BACKEND, f"{__name__}.elementwise:add", dtypes=DTYPES, supports=f"{__name__}.elementwise:supports_add",
        kernel=Ref(f"{__name__}.elementwise:kernel"))
    add("flatten", "direct", BACKEND, f"{__name__}.shape:flatten", dtypes=ANY_DTYPE,
        kernel="a reshape of the same memory (no kernel)")
