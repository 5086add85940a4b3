"""Saving and copying swap_backend Models: the Python frames that pickling and deep-copying take above their
caller (found by lowering the recursion limit until it fails), the pickle's size against the weights', and
the time of each.

    .venv/bin/python benchmarks/model_pickling.py torchvision:resnet50 torchvision:convnext_tiny torchvision:maxvit_t

Before issue 33 the frames grew with the graph's depth (a Model recursed node by node through its inputs);
now they are the same for every model.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle
import sys
import time
from typing import Any, Callable

from algoswap import swap_backend, zoo

WAYS: dict[str, Callable[[Any], Any]] = {
    "pickle": pickle.dumps,
    "pickle (Python)": lambda model: pickle._Pickler(io.BytesIO()).dump(model),  # type: ignore[attr-defined]
    "deepcopy": copy.deepcopy,
}


def frames_needed(function: Callable[[], Any]) -> int:
    """The fewest frames above this caller's with which ``function()`` raises no RecursionError."""
    here, low, high = len(inspect.stack(0)), 1, 20_000
    while low < high:
        middle = (low + high) // 2
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(here + middle)
        try:
            function()
            low, high = low, middle
        except RecursionError:
            low, high = middle + 1, high
        finally:
            sys.setrecursionlimit(old)
    return low


def seconds(function: Callable[[], Any]) -> str:
    """The best of three times of ``function()`` at the default recursion limit (or that it fails there)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        try:
            function()
        except RecursionError:
            return "RecursionError"
        best = min(best, time.perf_counter() - start)
    return f"{best:.2f}"


def main(names: list[str]) -> None:
    print("| model | nodes | frames: " + " | ".join(WAYS) + " | weights MB | pickle MB | pickle s | deepcopy s |")
    print("|---|---|" + "---|" * (len(WAYS) + 4))
    for name in names:
        model = swap_backend(zoo.build(name), None, zoo.input_shape(name, 1, small=True), fallback="torch")
        frames = [str(frames_needed(lambda: way(model))) for way in WAYS.values()]
        weights = sum(array.nbytes for array in model.constants.values())
        size = len(pickle.dumps(model))
        timing = [seconds(lambda: way(model)) for way in (pickle.dumps, copy.deepcopy)]
        print(f"| {name} | {len(model.nodes)} | {' | '.join(frames)} | {weights / 1e6:.1f} | {size / 1e6:.1f} | "
              f"{' | '.join(timing)} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["torchvision:resnet50", "torchvision:convnext_tiny", "torchvision:maxvit_t"])
