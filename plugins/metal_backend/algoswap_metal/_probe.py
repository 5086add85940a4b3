"""Whether this machine runs the two backends, answered without importing torch where it cannot (Linux, Windows)."""

from __future__ import annotations

import platform
import sys
from typing import Any

NEEDS = "needs macOS on Apple silicon with torch built with MPS"


def mps() -> Any:
    """True (an ``algoswap.Available`` naming the device) where torch's mps device works, else why not."""
    if sys.platform != "darwin":
        return f"{NEEDS} (this is {platform.system() or sys.platform} on {platform.machine() or 'an unknown machine'})"
    try:
        import torch
    except ImportError as exc:
        return f"{NEEDS}: torch does not import ({exc}); pip install torch"
    if not torch.backends.mps.is_built():
        return f"{NEEDS}: this torch ({torch.__version__}) was built without MPS"
    if not torch.backends.mps.is_available():
        return f"{NEEDS}: torch {torch.__version__} finds no MPS device (macOS 12.3 or later, an Apple GPU)"
    from algoswap import Available

    return Available(f"mps (torch {torch.__version__})")


def metal() -> Any:
    """As ``mps``, and torch must compile Metal Shading Language (torch.mps.compile_shader)."""
    answer = mps()
    if isinstance(answer, str):
        return answer
    import torch

    if not hasattr(torch.mps, "compile_shader"):
        return f"torch {torch.__version__} has no torch.mps.compile_shader, which compiles the kernels (torch 2.7 or later)"
    from algoswap import Available

    return Available(f"mps (torch {torch.__version__}), kernels compiled by torch.mps.compile_shader")
