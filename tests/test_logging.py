"""algoswap's log (``logging.getLogger("algoswap")``): debug records of selections and moves, the
warnings once per failed plugin (tests/plugin_system/test_discovery.py) and a backend taken out."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import algoswap


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "algoswap" and r.levelno == level]


def test_a_selection_is_a_debug_record_naming_the_choice_and_the_rejected(caplog: pytest.LogCaptureFixture) -> None:
    x = np.ones((1, 1, 5, 7), np.float32)  # a shape no other test selects for: the selection is made here
    with caplog.at_level(logging.DEBUG, logger="algoswap"):
        algoswap.ops.conv2d(x, np.ones((2, 1, 3, 3), np.float32), None, padding=1, algorithm="numpy:direct")
    chosen = [m for m in _messages(caplog, logging.DEBUG) if m.startswith("conv2d ((1, 1, 5, 7)")]
    assert len(chosen) == 1 and "chose numpy:direct" in chosen[0] and "(request 'numpy:direct')" in chosen[0], chosen


def test_rejected_candidates_are_in_the_record(caplog: pytest.LogCaptureFixture) -> None:
    x = np.ones((1, 1, 5, 9), np.float32)
    with caplog.at_level(logging.DEBUG, logger="algoswap"):
        selection = algoswap.select("conv2d", [x.shape, (2, 1, 5, 5), None], "float32", "default", padding=2)
    record = next(m for m in _messages(caplog, logging.DEBUG) if m.startswith("conv2d ((1, 1, 5, 9)"))
    backends = algoswap.registry().backends
    assert selection.rejected or "cuda" not in backends or backends["cuda"].availability() is True  # cuda's, without a GPU
    for name, reason in selection.rejected:
        assert f"{name}: {reason}" in record
    assert f"chose {selection.impl.qualified}" in record


def test_moves_between_memory_spaces_are_debug_records(caplog: pytest.LogCaptureFixture) -> None:
    sycl = algoswap.registry().backends.get("sycl")
    if sycl is None or sycl.availability() is not True:
        pytest.skip(f"needs a backend with its own memory space (sycl): {None if sycl is None else sycl.availability()}")
    with caplog.at_level(logging.DEBUG, logger="algoswap"):
        algoswap.ops.relu(np.ones((3, 4), np.float32), algorithm="sycl:direct", transfer=True)
    assert "relu: 1 input(s) moved host -> sycl" in _messages(caplog, logging.DEBUG)


def test_a_backend_taken_out_is_warned_of_once(caplog: pytest.LogCaptureFixture) -> None:
    from algoswap import _log

    _log._warned.clear()
    with caplog.at_level(logging.WARNING, logger="algoswap"):
        for _ in range(3):
            _log.backend_out("toy", "timed out", "its probe did not answer within 1 s")
    assert _messages(caplog, logging.WARNING) == [
        "backend 'toy' is timed out and out of selection: its probe did not answer within 1 s"]


def test_nothing_is_printed_unless_the_application_configures_logging() -> None:
    logger = logging.getLogger("algoswap")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
