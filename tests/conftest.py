"""Shared fixtures. Random inputs are fresh each session; the seed is printed so a failure can be replayed
with ALGOSWAP_TEST_SEED=<seed>.

Every test draws its randomness from the session seed and its own node id: the ``rng`` fixture, and,
reseeded before each test, the global generators of numpy, Python's ``random`` and torch (when torch is
loaded), so that a test gets the same numbers whether it runs alone or after others. A failing test's
report ends with the command that replays it; numeric checks go through ``helpers.assert_close``."""

from __future__ import annotations

import atexit
import getpass
import os
import random
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import helpers  # noqa: E402

SEED = int(os.environ.get("ALGOSWAP_TEST_SEED", random.SystemRandom().randrange(2**31)))
# Before torch or oneDNN loads libgomp: their idle OpenMP threads would otherwise spin after every op and
# starve the other runtime's (tests alternate torch, oneDNN and SYCL calls; see algoswap._cli.quiet_openmp_spinning).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# Plugin faults (README: "When a plugin crashes, hangs or misbehaves") are remembered per session, never
# read from the user's state directory: a process killed elsewhere during a probe must not skip a backend here.
os.environ["ALGOSWAP_STATE_DIR"] = tempfile.mkdtemp(prefix="algoswap-test-state-")
atexit.register(shutil.rmtree, os.environ["ALGOSWAP_STATE_DIR"], True)
# The verdicts of plugin checks (docs/publishing.md, "When a plugin crashes, hangs or misbehaves") are shared by
# every test process of this machine and user, as a user's are, so that a plugin set is checked in a child once,
# not in every session; never the user's own record. Tests of the checks give each command a record of its own.
os.environ.setdefault("ALGOSWAP_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"algoswap-test-cache-{getpass.getuser()}"))
# A loaded machine must not make a slow predicate (oneDNN times its candidates) look hung; the
# tests of the time limit set their own.
os.environ.setdefault("ALGOSWAP_PLUGIN_TIMEOUT", "120")


def pytest_report_header(config: pytest.Config) -> str:
    return f"algoswap test seed: {SEED} (replay with ALGOSWAP_TEST_SEED={SEED})"


def _test_key(nodeid: str) -> list[int]:
    return [SEED, zlib.crc32(nodeid.encode())]


@pytest.fixture
def cache_limit() -> Iterator[Callable[[str, int], None]]:
    """algoswap.set_cache_limit, with every limit it changed restored afterwards."""
    import algoswap

    saved: dict[str, int] = {}

    def set_limit(name: str, size: int) -> None:
        saved.setdefault(name, algoswap.cache_limits()[name].size)
        algoswap.set_cache_limit(name, size)

    yield set_limit
    for name, size in saved.items():
        algoswap.set_cache_limit(name, size)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the session seed and the test's id: fresh per run, replayable."""
    return np.random.default_rng(_test_key(request.node.nodeid))


@pytest.fixture(autouse=True)
def _seeded_and_replayable(request: pytest.FixtureRequest) -> Iterator[None]:
    """Seed the global generators from the session seed and the test's id; name the test for helpers' messages."""
    helpers.set_current_test(request.node.nodeid, SEED, Path(str(request.config.rootpath)))
    seed = int(np.random.SeedSequence(_test_key(request.node.nodeid) + [1]).generate_state(1, np.uint64)[0] >> 1)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("replay", helpers.replay_command(item.nodeid)))
