"""algoswap: a registry of deep-learning operator implementations with pip-installable backends.

``import algoswap`` is cheap: it imports no backend, no torch, and does not discover plugins.
Plugins (entry-point group ``algoswap.backends``) are discovered on first use of the registry.
"""

from __future__ import annotations

import importlib

from ._version import API_VERSION, __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from . import ops
    from ._api import capabilities, plugins, register_plugin, registry, retry_plugins, select
    from ._cache import CacheKind, LRUCache, cache_limits, declare_cache, set_cache_limit
    from ._frozen import freeze, is_frozen
    from ._capabilities import CapabilityMatrix
    from ._check import PluginReport, check_plugin
    from ._errors import (
        AlgoswapError,
        ImplementationError,
        ImplementationMemoryError,
        NoImplementationError,
        OpArgumentError,
        OpDtypeError,
        OutputTooLargeError,
        PluginError,
        RegistrationError,
    )
    from ._global import reload_plugins
    from ._records import HOST, Available, BackendRecord, ImplRecord, MemorySpace, PluginRecord
    from ._ref import Ref
    from ._registry import Registrar, Registry
    from ._select import Selection
    from ._spec import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, Attr, GradRule, Input, OpCall, OpSpec
    from ._specs import FAMILIES
    from ._specs.conv import FUSED_ACTIVATIONS
    from ._layout import is_channels_last
    from ._specs._geometry import ConvGeometry, conv_geometry, conv_output_size, pool_output_size
    from ._specs.attention import attention_mask
    from ._specs.resample import interpolation_taps
    from ._trace import trace
    from ._wishes import benchmark_wish, tf32_wish, tf32_wishes
    from ._widen import in_float32
    from .hookspecs import hookimpl
    from . import dist, graph, zoo
    from ._errors import SelectorError
    from ._requests import prefer
    from ._torch import Explanation, swap_conv2d, swap_operation
    from ._torch import Model, swap_backend
    from ._torch import swap_backend as convert
    from ._torch.explain import explain

_LAZY = {
    "ops": (".ops", None),
    "capabilities": ("._api", "capabilities"),
    "plugins": ("._api", "plugins"),
    "registry": ("._api", "registry"),
    "register_plugin": ("._api", "register_plugin"),
    "retry_plugins": ("._api", "retry_plugins"),
    "select": ("._api", "select"),
    "reload_plugins": ("._global", "reload_plugins"),
    "trace": ("._trace", "trace"),
    "tf32_wish": ("._wishes", "tf32_wish"),
    "benchmark_wish": ("._wishes", "benchmark_wish"),
    "tf32_wishes": ("._wishes", "tf32_wishes"),
    "in_float32": ("._widen", "in_float32"),
    "freeze": ("._frozen", "freeze"),
    "is_frozen": ("._frozen", "is_frozen"),
    "LRUCache": ("._cache", "LRUCache"),
    "CacheKind": ("._cache", "CacheKind"),
    "declare_cache": ("._cache", "declare_cache"),
    "cache_limits": ("._core_caches", "cache_limits"),  # the core's kinds declared first
    "set_cache_limit": ("._core_caches", "set_cache_limit"),
    "CapabilityMatrix": ("._capabilities", "CapabilityMatrix"),
    "check_plugin": ("._check", "check_plugin"),
    "PluginReport": ("._check", "PluginReport"),
    "Selection": ("._select", "Selection"),
    "Registrar": ("._registry", "Registrar"),
    "Registry": ("._registry", "Registry"),
    "OpSpec": ("._spec", "OpSpec"),
    "Input": ("._spec", "Input"),
    "Attr": ("._spec", "Attr"),
    "OpCall": ("._spec", "OpCall"),
    "FLOAT_DTYPES": ("._spec", "FLOAT_DTYPES"),
    "INT_DTYPES": ("._spec", "INT_DTYPES"),
    "ALL_DTYPES": ("._spec", "ALL_DTYPES"),
    "FAMILIES": ("._specs", "FAMILIES"),
    "FUSED_ACTIVATIONS": ("._specs.conv", "FUSED_ACTIVATIONS"),
    "pool_output_size": ("._specs._geometry", "pool_output_size"),
    "interpolation_taps": ("._specs.resample", "interpolation_taps"),
    "attention_mask": ("._specs.attention", "attention_mask"),
    "is_channels_last": ("._layout", "is_channels_last"),
    "conv_output_size": ("._specs._geometry", "conv_output_size"),
    "conv_geometry": ("._specs._geometry", "conv_geometry"),
    "ConvGeometry": ("._specs._geometry", "ConvGeometry"),
    "GradRule": ("._spec", "GradRule"),
    "MemorySpace": ("._records", "MemorySpace"),
    "Ref": ("._ref", "Ref"),
    "HOST": ("._records", "HOST"),
    "Available": ("._records", "Available"),
    "BackendRecord": ("._records", "BackendRecord"),
    "ImplRecord": ("._records", "ImplRecord"),
    "PluginRecord": ("._records", "PluginRecord"),
    "hookimpl": (".hookspecs", "hookimpl"),
    "swap_conv2d": ("._torch", "swap_conv2d"),
    "swap_operation": ("._torch", "swap_operation"),
    "swap_backend": ("._torch", "swap_backend"),
    "convert": ("._torch", "swap_backend"),
    "Model": ("._torch", "Model"),
    "explain": ("._torch.explain", "explain"),
    "Explanation": ("._torch", "Explanation"),
    "prefer": ("._requests", "prefer"),
    "SelectorError": ("._errors", "SelectorError"),
    "zoo": (".zoo", None),
    "graph": (".graph", None),
    "dist": (".dist", None),
    "AlgoswapError": ("._errors", "AlgoswapError"),
    "OpArgumentError": ("._errors", "OpArgumentError"),
    "OpDtypeError": ("._errors", "OpDtypeError"),
    "NoImplementationError": ("._errors", "NoImplementationError"),
    "ImplementationError": ("._errors", "ImplementationError"),
    "ImplementationMemoryError": ("._errors", "ImplementationMemoryError"),
    "OutputTooLargeError": ("._errors", "OutputTooLargeError"),
    "PluginError": ("._errors", "PluginError"),
    "RegistrationError": ("._errors", "RegistrationError"),
}

__all__ = ["API_VERSION", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'algoswap' has no attribute {name!r}") from None
    try:
        module = importlib.import_module(module_name, __name__)
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ImportError(f"algoswap.{name} needs PyTorch: pip install 'algoswap[torch]' (or torch itself)") from exc
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
