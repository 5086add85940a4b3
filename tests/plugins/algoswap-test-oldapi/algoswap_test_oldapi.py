"""A throwaway algoswap plugin written for a core API this core does not provide."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")


def algoswap_api_version():
    return ">=2,<3"


def algoswap_register(registry):
    registry.add_backend("oldapi")
