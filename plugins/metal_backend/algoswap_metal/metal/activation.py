"""relu on our kernel (float32): one thread per element, NaN kept."""

from __future__ import annotations

from .._device import MpsArray
from . import _launch


def relu(x: MpsArray) -> MpsArray:
    y = _launch.empty(x.shape)
    _launch.run("relu", x.tensor, y, _launch.params("CountParams", count=y.numel()), threads=[y.numel()], group=[256])
    return MpsArray(y)
