"""A working throwaway algoswap plugin: backend "toy" (relu) and "toy_offline" (never available)."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def relu(x):
    import numpy

    return numpy.maximum(x, 0)


def _offline_probe():
    return "no toy device here"


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    registry.add_backend("toy", description="test backend")
    registry.add_implementation("relu", "direct", "toy", relu, kernel="toy numpy.maximum")
    registry.add_backend("toy_offline", probe=_offline_probe, description="test backend that is never available")
    registry.add_implementation("relu", "direct", "toy_offline", relu)
