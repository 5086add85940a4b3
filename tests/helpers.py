"""Small helpers shared by test modules (tests/ is on sys.path: ``from helpers import relative_error``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref||, computed in float64 (a zero ``ref`` divides by the smallest float64 instead)."""
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))
