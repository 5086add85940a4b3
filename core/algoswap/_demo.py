"""``algoswap demo``: what is installed, what runs where, and every conv2d algorithm side by side."""

from __future__ import annotations

import time
from typing import Any, Callable

from ._cli import main as cli


def _relative_error(out: Any, ref: Any) -> float:
    import numpy as np

    return float(np.linalg.norm(np.asarray(out) - ref) / np.linalg.norm(ref))


def _median_ms(fn: Callable[[], Any], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2] * 1e3


def run_demo() -> int:
    """Print the backends and the matrix, then run each available conv2d implementation on one layer."""
    import numpy as np

    from . import ops
    from ._global import get_registry
    from ._capabilities import build
    from ._select import select

    print("== backends ==")
    cli(["backends"])
    print("\n== capability matrix: the algorithms each backend offers per op (algoswap caps for the tables) ==")
    registry = get_registry()
    print(build(registry).to_summary())
    impls = [i for i in registry.implementations("conv2d") if registry.backends[i.backend].availability() is True]
    if not impls:
        print("\nno conv2d implementation is available: install a backend (make demo installs algoswap-numpy)")
        return 0
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32, 28, 28), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    ref = ops.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), padding=1, algorithm="numpy:direct")
    print(f"\n== conv2d {x.shape} * {w.shape}, padding 1, float32: every implementation ==")
    print(f"{'implementation':<20} {'kernel':<40} {'ms':>8} {'rel. error':>11}")
    for impl in impls:
        def run(name: str = impl.qualified) -> Any:
            return ops.conv2d(x, w, b, padding=1, algorithm=name)

        error = _relative_error(run(), ref)
        selection = select(registry, "conv2d", [x.shape, w.shape, b.shape], ["float32"] * 3, {"padding": 1}, impl.qualified)
        print(f"{impl.qualified:<20} {selection.kernel:<40} {_median_ms(run):8.2f} {error:11.2e}")
    return 0
