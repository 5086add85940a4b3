"""The README and the plugin-author guide are the manual: their Python examples must run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "plugins.md"
MODULE_HEADER = re.compile(r"^# (\w+)/(\w+)\.py\b")


def python_blocks(document: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", document.read_text(), flags=re.S)


def run_examples(document: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Every Python block of ``document`` run in order as one script, in ``tmp_path``; a block headed
    ``# package/module.py`` is written there as that module instead."""
    script = []
    for block in python_blocks(document):
        header = MODULE_HEADER.match(block)
        if header:  # a plugin's module shown in the README: make it importable as written
            package = tmp_path / header.group(1)
            package.mkdir(exist_ok=True)
            (package / f"{header.group(2)}.py").write_text(block)
        else:
            script.append(block)
    assert len(script) >= 2, f"{document.name} lost its examples"
    (tmp_path / "examples.py").write_text("\n".join(script))
    return subprocess.run([sys.executable, "examples.py"], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS)


def test_readme_examples_run(tmp_path: Path) -> None:
    done = run_examples(README, tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "(2, 10)" in out and "['numpy']" in out
    assert "conv2d: argument 'weight' got shape (8, 2, 3, 3)" in out
    assert "node 'sum' (add)" in out and "operands: a=a (3, 4) float32, b=b (5,) float32" in out  # graphs


def test_plugin_guide_examples_run(tmp_path: Path) -> None:
    """docs/plugins.md: its example plugin registers, computes, passes check_plugin and the kit."""
    done = run_examples(GUIDE, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["loaded", "[0.", "2.]", "[0.5]", "True", "False"], done.stdout
