"""The core is typed (py.typed ships with it): mypy --strict, configured in pyproject.toml, passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[1]


def test_core_passes_strict_mypy() -> None:
    pytest.importorskip("mypy", reason="mypy is installed by `make test`")
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
