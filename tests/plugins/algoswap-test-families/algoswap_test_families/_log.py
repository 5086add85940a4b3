"""Tests prove a module is (or is not) imported: every import is appended to ALGOSWAP_TEST_IMPORT_LOG."""

import os


def imported(name):
    if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
        with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as log:
            log.write(name + "\n")
