"""The kit's pytest plugin (entry point ``pytest11: algoswap``): ``pytest --pyargs algoswap.testing
[--algoswap-backend NAME ...] [--algoswap-seed N]`` runs the kit's checks as tests (test_kit.py), one per
implementation, kind of check and dtype. Loaded by every pytest run where algoswap is installed, it only adds
these options until the ``algoswap_check`` fixture is asked for: it imports nothing else before."""

from __future__ import annotations

import os
import random

import pytest

SEED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("algoswap", "algoswap conformance kit (pytest --pyargs algoswap.testing)")
    group.addoption("--algoswap-backend", action="append", default=[], metavar="NAME",
                    help="a backend whose implementations the kit checks (repeatable; default: every registered backend)")
    group.addoption("--algoswap-seed", type=int, default=None, metavar="N",
                    help="the seed of the kit's random inputs (default: ALGOSWAP_TEST_SEED, else a fresh one)")


def _seed(config: pytest.Config) -> int:
    if SEED not in config.stash:
        given = config.getoption("--algoswap-seed")
        fresh = os.environ.get("ALGOSWAP_TEST_SEED") or random.SystemRandom().randrange(2**31)
        config.stash[SEED] = int(fresh) if given is None else int(given)
    return config.stash[SEED]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "algoswap_check" not in metafunc.fixturenames:
        return
    from ._kit import plan

    backends = metafunc.config.getoption("--algoswap-backend") or None
    params = [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip else []) for c in plan(backends)]
    metafunc.parametrize("algoswap_check", params)


def pytest_collection_finish(session: pytest.Session) -> None:
    if any("algoswap_check" in getattr(item, "fixturenames", ()) for item in session.items):
        seed = _seed(session.config)
        session.config.get_terminal_writer().line(f"algoswap.testing seed: {seed} (replay with --algoswap-seed {seed})")


@pytest.fixture
def algoswap_seed(request: pytest.FixtureRequest) -> int:
    """The seed of the kit's random inputs in this session."""
    return _seed(request.config)
