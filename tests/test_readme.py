"""The README is the manual: its Python examples must run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import HANG_SECONDS

README = Path(__file__).resolve().parents[1] / "README.md"
MODULE_HEADER = re.compile(r"^# (\w+)/(\w+)\.py\b")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run(tmp_path: Path) -> None:
    script = []
    for block in python_blocks():
        header = MODULE_HEADER.match(block)
        if header:  # a plugin's module shown in the README: make it importable as written
            package = tmp_path / header.group(1)
            package.mkdir(exist_ok=True)
            (package / f"{header.group(2)}.py").write_text(block)
        else:
            script.append(block)
    assert len(script) >= 4, "the README lost its examples"
    (tmp_path / "readme_examples.py").write_text("\n".join(script))
    done = subprocess.run([sys.executable, "readme_examples.py"], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "(2, 10)" in out and "['numpy']" in out
    assert "conv2d: argument 'weight' got shape (8, 2, 3, 3)" in out
    assert "loaded" in out and "[0. 2. 0. 4.]" in out and "[0.5]" in out
    assert "node 'sum' (add)" in out and "operands: a=a (3, 4) float32, b=b (5,) float32" in out  # graphs
