"""The cppconv backend of algoswap: conv2d algorithm "direct" in C++ (src/conv.cpp, OpenMP).

algoswap finds this module through the entry point ``cppconv = "algoswap_cppconv"`` (group ``algoswap.backends``)
and calls its two hooks (every hook is documented in ``algoswap.hookspecs``). Everything is registered as
"module:attribute" references: discovery imports neither ``conv`` nor the compiled extension; the
availability probe loads it once, when the backend is first considered.
"""

from typing import Any

from algoswap import Ref

BACKEND = "cppconv"
__version__ = "0.1.0"


def algoswap_api_version() -> str:
    return ">=1.2,<2"  # the core plugin-API versions this plugin is written for (algoswap.API_VERSION)


def probe() -> bool | str:
    """True if the compiled extension loads, else why not (a reason, never an exception)."""
    try:
        from . import _kernels  # noqa: F401
    except ImportError as exc:
        return f"the C++ extension {__name__}._kernels does not load: {exc}"
    return True


def algoswap_register(registry: Any) -> None:
    # priority: how backends rank when a call names none (the NumPy reference has 0, oneDNN 10)
    registry.add_backend(BACKEND, device="cpu", priority=0, probe=probe,
                         description="cppconv: conv2d in C++ (float32, OpenMP)")
    conv = f"{__name__}.conv"
    registry.add_implementation(
        "conv2d", "direct", BACKEND, f"{conv}:conv2d_direct",
        dtypes=("float32",),
        supports=f"{conv}:supports",   # True, or the sentence saying why a call is refused
        kernel=Ref(f"{conv}:kernel"),  # the kernel the extension runs for a call, as `explain` shows it
        description="direct convolution in C++ over C-contiguous float32 NCHW arrays",
    )
