"""``algoswap demo``: the main job on a zoo model first, then the backends found, the explanation of
the fastest run, and (``--matrix``) the capability matrix."""

from __future__ import annotations

import importlib.util
from typing import Any

from ._cli import _backend_rows


def run_demo(model: str = "resnet18", batch: int = 1, small: bool = False, repeats: int = 3,
             matrix: bool = False, slow: bool = False) -> int:
    """Swap the model's convolutions algorithm by algorithm and report; ``slow``: also the slow reference algorithms."""
    from ._global import get_registry

    registry = get_registry()
    if not registry.implementations("conv2d"):
        print("no conv2d implementation is installed: install a backend (make demo installs algoswap-numpy)")
    elif importlib.util.find_spec("torch") is None:
        print("the main job swaps layers of a PyTorch model: install torch (pip install 'algoswap[torch]')")
    else:
        from ._torch.job import print_job

        job = print_job(model, batch, small, repeats, slow)
        print()
        print_backends()
        print()
        print_fastest(job)
        return print_matrix() if matrix else 0
    print()
    print_backends()
    return print_matrix() if matrix else 0


def print_backends() -> None:
    """One line per backend found (or plugin that declared none): available on what, or why not."""
    rows = _backend_rows()
    print("== backends (`algoswap backends` for details) ==")
    if not rows:
        print("none: no plugin is installed (entry-point group 'algoswap.backends'), e.g. pip install ./plugins/numpy_backend")
    names = [row["backend"] or f"[{row['plugin']}]" for row in rows]
    width = max(map(len, names), default=0)
    for name, row in zip(names, rows):
        where = f" on {row['device']}" if row["status"] == "available" and row["device"] else ""
        reason = f": {row['reason']}" if row["reason"] else ""
        print(f"{name:<{width}}  {row['status']}{where}{reason}  ({row['distribution']} {row['version']})")


def print_fastest(job: Any) -> None:
    """``explain`` of the fastest run that passed: each distinct reason once, no backward column (inference)."""
    from ._torch.explain import explain

    if job.fastest is None:
        print("== explain: no run passed its check against PyTorch: nothing to explain ==")
        return
    print(f"== explain: the fastest run, {job.fastest.label} ({job.fastest.median:.1f} ms): "
          "which implementation and kernel ran each layer ==")
    print(explain(job.fastest_model).to_text(backward=False, notes_once=True))


def print_matrix() -> int:
    from ._capabilities import build
    from ._global import get_registry

    print("\n== capability matrix: the algorithms each backend offers per op (`algoswap caps` for the tables) ==")
    print(build(get_registry()).to_summary())
    return 0
