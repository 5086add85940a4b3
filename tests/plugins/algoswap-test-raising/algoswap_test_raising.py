"""A throwaway algoswap plugin whose registration raises half-way (after add_backend)."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def _relu(x):
    raise AssertionError("never registered, never called")


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    registry.add_backend("raising")
    registry.add_implementation("relu", "direct", "raising", _relu)
    raise ValueError("boom during registration")
