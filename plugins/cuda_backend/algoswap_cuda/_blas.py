"""Matrix products on cuBLAS through cupy.matmul, with TF32 allowed only when the user asked for it."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np
from cupy._core import _routines_linalg as _linalg

from . import _runtime

_set: dict[str, bool] = {}


def _follow_tf32() -> None:
    """CuPy's float32 compute type is process-wide: switch it only when our TF32 setting changed."""
    wanted = _runtime.tf32()
    if _set.get("tf32") is not wanted:
        _linalg.set_compute_type(np.float32, _linalg.COMPUTE_TYPE_TF32 if wanted else _linalg.COMPUTE_TYPE_DEFAULT)
        _set["tf32"] = wanted


def matmul(a: Any, b: Any) -> Any:
    """a @ b (batched, broadcasting) on cuBLAS."""
    if a.dtype == np.float32:
        _follow_tf32()
    return cp.matmul(a, b)
