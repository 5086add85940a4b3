"""Hangs: sleeps ALGOSWAP_TEST_HAZARD_SECONDS (default 60)."""

import os
import time

from . import install

install(globals(), lambda: time.sleep(float(os.environ.get("ALGOSWAP_TEST_HAZARD_SECONDS", "60"))))
