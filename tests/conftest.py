"""Shared fixtures. Random inputs are fresh each session; the seed is printed so a failure can be replayed
with ALGOSWAP_TEST_SEED=<seed>."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

SEED = int(os.environ.get("ALGOSWAP_TEST_SEED", random.SystemRandom().randrange(2**31)))
# Before torch or oneDNN loads libgomp: their idle OpenMP threads would otherwise spin after every op and
# starve the other runtime's (tests alternate torch, oneDNN and SYCL calls; see algoswap._cli.quiet_openmp_spinning).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# Plugin faults (README: "When a plugin crashes, hangs or misbehaves") are remembered per session, never
# read from the user's state directory: a process killed elsewhere during a probe must not skip a backend here.
os.environ["ALGOSWAP_STATE_DIR"] = tempfile.mkdtemp(prefix="algoswap-test-state-")
atexit.register(shutil.rmtree, os.environ["ALGOSWAP_STATE_DIR"], True)
# A loaded machine must not make a slow predicate (oneDNN times its candidates) look hung; the
# tests of the time limit set their own.
os.environ.setdefault("ALGOSWAP_PLUGIN_TIMEOUT", "120")


def pytest_report_header(config: pytest.Config) -> str:
    return f"algoswap test seed: {SEED} (replay with ALGOSWAP_TEST_SEED={SEED})"


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the session seed and the test's id: fresh per run, replayable."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])
