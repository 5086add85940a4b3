"""A test backend with its own memory space ("boxed"): its arrays are numpy arrays in a Box, its
kernels unbox, call the NumPy reference, and box again, and every move between host and box is
counted in MOVES. Registered in-process by ``register_boxed(ops)``; ``algoswap.reload_plugins()``
removes it."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

import algoswap

MOVES = {"up": 0, "down": 0}
# While RECORDING["on"] (a capture, see test_capture.py) the ops in RECORDING["host_reads"] fail, as a GPU
# kernel that reads a value back to the host fails inside a CUDA graph capture.
RECORDING: dict[str, Any] = {"on": False, "host_reads": set()}


@dataclass
class Box:
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def _upload(array: Any) -> Box:
    MOVES["up"] += 1
    return Box(np.array(array))


def _download(box: Box) -> np.ndarray:
    MOVES["down"] += 1
    return box.data.copy()


def _boxed(op: str, algorithm: str) -> Any:
    def run(*inputs: Any, **attrs: Any) -> Box:
        assert all(a is None or isinstance(a, Box) for a in inputs), "a host array reached a boxed kernel"
        if RECORDING["on"] and op in RECORDING["host_reads"]:
            raise RuntimeError(f"{op} reads a value back to the host, which is disallowed while capturing")
        arrays = [None if a is None else a.data for a in inputs]
        result = algoswap.ops.call(op, *arrays, algorithm=f"numpy:{algorithm}", **attrs)
        return inputs[0] if result is arrays[0] else Box(result)  # an in-place op returns its first input

    return run


def register_boxed(ops: Iterable[tuple[str, str]], priority: int = -5, capture: Any = None) -> None:
    """Register the boxed backend with these (op, NumPy algorithm) implementations; zero MOVES.
    ``capture``: its memory space's (see ``algoswap.MemorySpace``)."""
    ops = list(ops)

    def register(registry: Any) -> None:
        space = algoswap.MemorySpace("boxed", "Box", to_host=_download, from_host=_upload, capture=capture)
        registry.add_backend("boxed", memory=space, priority=priority)
        for op, algorithm in ops:
            registry.add_implementation(op, algorithm, "boxed", _boxed(op, algorithm))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="boxed").status == "loaded"
    MOVES.update(up=0, down=0)
