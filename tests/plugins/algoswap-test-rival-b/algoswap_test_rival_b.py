"""A throwaway algoswap plugin declaring the backend "rival", which algoswap-test-rival-a declares too."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def _relu(x):
    raise AssertionError("a contested backend is never registered, never called")


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    registry.add_backend("rival")
    registry.add_implementation("relu", "direct", "rival", _relu)
