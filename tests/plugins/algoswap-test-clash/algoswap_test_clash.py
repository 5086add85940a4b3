"""A throwaway algoswap plugin that claims the backend "numpy", which algoswap-numpy owns."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def _conv2d(*args, **kwargs):
    raise AssertionError("the clashing conv2d must never be called")


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    registry.add_backend("numpy", priority=100)
    registry.add_implementation("conv2d", "direct", "numpy", _conv2d, priority=100)
