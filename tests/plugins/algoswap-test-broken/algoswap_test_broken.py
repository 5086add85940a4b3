"""A throwaway algoswap plugin that fails on import."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

raise RuntimeError("boom at import")
