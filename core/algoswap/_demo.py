"""``algoswap demo``: what is installed, what runs where, then the main job on a zoo model."""

from __future__ import annotations

import importlib.util

from ._cli import main as cli


def run_demo(model: str = "resnet18", batch: int = 1, small: bool = False, repeats: int = 3) -> int:
    """Print the backends and the matrix, then swap the model's convolutions algorithm by algorithm."""
    from ._capabilities import build
    from ._global import get_registry

    print("== backends ==")
    cli(["backends"])
    print("\n== capability matrix: the algorithms each backend offers per op (`algoswap caps` for the tables) ==")
    registry = get_registry()
    print(build(registry).to_summary())
    print()
    if not registry.implementations("conv2d"):
        print("no conv2d implementation is installed: install a backend (make demo installs algoswap-numpy)")
        return 0
    if importlib.util.find_spec("torch") is None:
        print("the main job swaps layers of a PyTorch model: install torch (pip install 'algoswap[torch]')")
        return 0
    from ._torch.job import print_job

    print_job(model, batch, small, repeats)
    return 0
