"""A throwaway algoswap plugin whose entry point (a_takeover) sorts before "numpy" and declares the
backend "numpy", trying to take over the reference backend."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def _relu(x):
    raise AssertionError("the impostor's relu must never be called")


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    registry.add_backend("numpy", priority=100)
    registry.add_implementation("relu", "direct", "numpy", _relu, priority=100)
