"""concat on the oneDNN concat primitive (inputs seen as (outer, n_i, inner) along the axis).

4-D inputs most of which are channels-last (NHWC memory, as the convolutions leave them) are joined in
NHWC memory, and the result is channels-last too: DenseNet joins every earlier layer's output at each
layer, and copying each into NCHW order first cost more than the joins themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ext import dnnl
from ._layout import from_memory_order, is_channels_last, to_memory_order

_NHWC_AXIS = (0, 3, 1, 2)  # an NCHW axis -> the same axis of the (N, H, W, C) array


def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    """Join the inputs along ``axis`` (canonical: non-negative)."""
    if _mostly_channels_last(inputs):
        joined = dnnl.concat([to_memory_order(x, True) for x in inputs], _NHWC_AXIS[axis])
        return from_memory_order(joined, True)
    return dnnl.concat([np.ascontiguousarray(x) for x in inputs], axis)


def _mostly_channels_last(inputs: tuple[np.ndarray, ...]) -> bool:
    """Whether the inputs are 4-D and more of their elements are in NHWC memory than not."""
    if inputs[0].ndim != 4:
        return False
    nhwc = sum(x.size for x in inputs if is_channels_last(x))
    return 2 * nhwc > sum(x.size for x in inputs)


def kernel(call: Any) -> str:
    if 0 in call.out_shape:
        return "none (empty array)"
    return str(dnnl.concat_impl([list(s) for s in call.shapes if s is not None], call.attrs["axis"]).impl)
