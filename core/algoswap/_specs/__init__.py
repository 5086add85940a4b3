"""The op specs the core declares, by family; plugins may declare more through the registry.

A family is one module of this package: its ops are the specs it defines (``SPECS``). A backend's
modules mirror these by name (``algoswap_numpy.activation``), so that ``registry.add_family``
finds each op's function in the backend module of its family.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .._spec import OpSpec
from . import (
    activation, arith, attention, comm, conv, dropout, elementwise, indexing, linear, loss, matmul, norm, optim, pool, reduce,
    resample, shape, slicing, softmax, sparse,
)

# In the order ops are listed (the capability matrix's)
_MODULES = (conv, linear, pool, resample, activation, shape, elementwise, norm, softmax, arith, matmul, attention, reduce,
            slicing, indexing, dropout, loss, sparse, optim, comm)

FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {module.__name__.rpartition(".")[2]: tuple(spec.name for spec in module.SPECS) for module in _MODULES})
"""Each family's ops: ``FAMILIES["activation"] == ("relu", "relu_grad", ...)``."""


def core_specs() -> tuple[OpSpec, ...]:
    """Every op spec of the core, in a stable order."""
    return tuple(spec for module in _MODULES for spec in module.SPECS)
