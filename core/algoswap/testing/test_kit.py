"""The kit's checks as pytest tests (parametrized by _pytest_plugin.py):
``pytest --pyargs algoswap.testing --algoswap-backend NAME``."""

from __future__ import annotations

import pytest

from ._kit import Check


def test_conforms(algoswap_check: Check, algoswap_seed: int) -> None:
    failure = algoswap_check.run(algoswap_seed)
    if failure is not None:
        pytest.fail(str(failure), pytrace=False)
