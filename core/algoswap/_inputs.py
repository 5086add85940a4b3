"""Host inputs: what ``algoswap.ops`` and a swap_backend Model take as an array, and a clear error for
what is not one (a str, a dict, a ragged list, a tensor that requires grad or lives on a device)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._errors import OpArgumentError
from ._runner import describe

_EXPECTED = "a numpy array (or a number, or a nested list of numbers)"
_NUMERIC_KINDS = "biufcV"  # bool, ints, floats, complex; V: ml_dtypes' bfloat16


def host_array(value: Any, op: str, name: Callable[[], str]) -> np.ndarray:
    """``value`` as a numpy array, or an OpArgumentError naming ``op`` and the argument (``name()``)."""
    if type(value).__module__.partition(".")[0] == "torch":
        value = _from_tensor(value, op, name)
    if isinstance(value, (str, bytes, dict, set, frozenset)) or value is None:
        raise OpArgumentError(op, name(), shown(value), _EXPECTED)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        if "inhomogeneous" in str(exc):
            raise OpArgumentError(op, name(), "a ragged nested list (rows of different lengths)", _EXPECTED) from None
        raise OpArgumentError(op, name(), shown(value), f"{_EXPECTED} ({type(exc).__name__}: {exc})") from None
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise OpArgumentError(op, name(), shown(value), _EXPECTED)
    return array


def _from_tensor(tensor: Any, op: str, name: Callable[[], str]) -> Any:
    if getattr(tensor, "requires_grad", False):
        raise OpArgumentError(op, name(), "a torch.Tensor that requires grad",
                              "a numpy array or a tensor without autograd (tensor.detach()); for autograd through "
                              "the registry, swap the layer (algoswap.swap_operation)")
    device = getattr(tensor, "device", None)
    if device is not None and device.type != "cpu":
        raise OpArgumentError(op, name(), f"a torch.Tensor on {device}", "a numpy array or a CPU tensor (tensor.cpu())")
    return tensor


def shown(value: Any) -> str:
    """A value given where an array was expected, for error messages."""
    if isinstance(value, (str, bytes)):
        text = repr(value)
        return f"a {type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, (bool, int, float, complex)):
        return f"a {type(value).__name__} {value!r}"
    return describe(value)
