"""The README, the pages under docs/ and the plugins' READMEs (each backend's page: docs/backends/NAME.md includes
plugins/NAME_backend/README.md) are the manual: every Python block in them runs as written, on its own.

Each ```python block runs in a fresh process (its own imports, nothing carried over from the block before), in a
folder of its page, where the page's blocks headed ``# package/module.py`` were written as those modules (a
plugin shown module by module imports as written). A block that cannot run here (it needs a GPU, oneDNN's
bfloat16 hardware or the network) is fenced ```python no-run; nothing else may be (docs/development.md).
A page shows what a block prints as a ```text block right after it (nothing but blank lines between):
test_shown_output_is_what_the_block_prints compares that text with the block's stdout, exactly but for two
normalisations (docs/development.md, "The documentation site"):
- ``...`` in the shown text matches any text, newlines included (like doctest's ELLIPSIS): a whole line of
  ``...`` stands for rows left out, ``...`` inside a line for a value that varies (a time, random data);
- trailing whitespace at the end of each line, and blank lines at the end, are ignored.
A ```text block that follows anything else (a shell command's output, a format, a listing) is not checked.
Values shown in comments (``print(x)   # True``) are checked by the named tests below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PLUGIN_READMES = sorted((ROOT / "plugins").glob("*_backend/README.md"))
# The backend pages are read through their plugins' READMEs: docs/backends/*.md hold only the include lines.
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md")), *PLUGIN_READMES]
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', flags=re.M)
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", flags=re.S | re.M)
MODULE_HEADER = re.compile(r"^# (\w+)/(\w+)\.py\b")
SHOWN = re.compile(r"\s*^```text\n(.*?)^```", flags=re.S | re.M)  # a block's shown output, right after it
NO_RUN = "no-run"


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    info: str
    code: str
    shown: str | None = None  # the ```text block right after it: what it prints

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def module(self) -> re.Match[str] | None:
        return MODULE_HEADER.match(self.code)


def python_blocks(document: Path = README) -> list[Block]:
    text = document.read_text()
    blocks = []
    for match in BLOCK.finditer(text):
        shown = SHOWN.match(text, match.end())
        blocks.append(Block(document, text.count("\n", 0, match.start()) + 1, match.group(1).strip(), match.group(2),
                            shown.group(1) if shown else None))
    return blocks


def shown_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is the ``shown`` text: ``...`` matches anything; trailing whitespace is ignored."""
    def lines(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.rstrip().split("\n"))
    pattern = ".*?".join(re.escape(part) for part in lines(shown).split("..."))
    return re.fullmatch(pattern, lines(printed), flags=re.S) is not None


def runnable(document: Path) -> list[Block]:
    return [block for block in python_blocks(document) if not block.module and NO_RUN not in block.info.split()]


_RESULTS: dict[str, subprocess.CompletedProcess[str]] = {}


def run_block(block: Block, tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """``block`` run once per session in a fresh interpreter, in a folder holding its page's modules."""
    if block.name not in _RESULTS:
        folder = tmp_path_factory.mktemp(block.document.stem)
        for other in python_blocks(block.document):
            if other.module:  # a plugin's module shown on the page: importable as written
                package = folder / other.module.group(1)
                package.mkdir(exist_ok=True)
                (package / f"{other.module.group(2)}.py").write_text(other.code)
        (folder / "block.py").write_text(block.code)
        # tests/ on the path for the contributor pages' `from helpers import ...`
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
        _RESULTS[block.name] = subprocess.run([sys.executable, "block.py"], cwd=folder, env=env, capture_output=True,
                                              text=True, timeout=HANG_SECONDS)
    return _RESULTS[block.name]


def output(document: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """What the runnable blocks of ``document`` print, in order."""
    return "".join(run_block(block, tmp_path_factory).stdout for block in runnable(document))


ALL_BLOCKS = [block for document in DOCUMENTS for block in python_blocks(document)]


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if not b.module and NO_RUN not in b.info.split()],
                         ids=lambda block: block.name)
def test_every_python_block_runs_on_its_own(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    done = run_block(block, tmp_path_factory)
    assert done.returncode == 0, f"{block.name}:\n{done.stderr}"
    assert "Warning" not in done.stderr, f"{block.name} warns:\n{done.stderr}"


SHOWN_BLOCKS = [b for b in ALL_BLOCKS if b.shown is not None]


@pytest.mark.parametrize("block", SHOWN_BLOCKS, ids=lambda block: block.name)
def test_shown_output_is_what_the_block_prints(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert not block.module and NO_RUN not in block.info.split(), f"{block.name}: shows an output it cannot print here"
    done = run_block(block, tmp_path_factory)
    assert done.returncode == 0, f"{block.name}:\n{done.stderr}"
    assert shown_matches(block.shown, done.stdout), f"{block.name} shows:\n{block.shown}\nbut prints:\n{done.stdout}"


def test_shown_output_normalisation() -> None:
    assert shown_matches("a\n...\nz\n", "a\nb\nc\nz\n") and shown_matches("a\n...\nz", "a\n\nb\nz")
    assert shown_matches("took ... ms  \n", "took 3.2 ms\n\n") and shown_matches("[1.0 2.0]", "[1.0 2.0]")
    assert not shown_matches("a\nz", "a\nb\nz") and not shown_matches("took ... ms", "took 3 s")
    assert not shown_matches("x = 1", "x = 10")


def test_the_manual_has_its_examples_and_marks_few_as_not_runnable() -> None:
    """The README keeps its three examples; the pages still hold theirs; only the info string marks a block."""
    assert len(runnable(README)) == 3, "the README lost (or gained) examples"
    assert len([b for b in ALL_BLOCKS if not b.module]) >= 20, "the pages lost their examples"
    for block in ALL_BLOCKS:
        assert set(block.info.split()) <= {NO_RUN}, f"{block.name}: unknown fence info {block.info!r}"
    assert SHOWN_BLOCKS, "no page shows a block's output any more"
    skipped = [b.name for b in ALL_BLOCKS if NO_RUN in b.info.split()]
    assert len(skipped) <= 5, f"too many blocks marked {NO_RUN}: {skipped}"


def test_readme_examples_print_what_they_show(tmp_path_factory: pytest.TempPathFactory) -> None:
    assert output(README, tmp_path_factory).split("\n") == [
        "True", "['numpy:smm', 'numpy:winograd']", "(1, 4, 16, 16) True", "True", "True", ""]


def test_user_guide_examples_print_what_they_show(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = output(ROOT / "docs" / "guide.md", tmp_path_factory)
    assert "(2, 10)" in out and "['numpy']" in out
    assert "conv2d: argument 'weight' got shape (8, 2, 3, 3)" in out
    assert "node 'sum' (add)" in out and "operands: a=a (3, 4) float32, b=b (5,) float32" in out  # graphs
    assert "(8, 14, 14)" in out and "['torch (requested)', 'my_conv:custom']" in out  # swap_with
    assert "SpecialConv direct smm" in out and "['SpecialConv (swap_with)', 'SpecialConv (swap_with)']" in out  # a class


def test_plugin_guide_examples_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    """docs/plugins.md: its example plugin registers, computes, passes check_plugin and the kit."""
    out = output(ROOT / "docs" / "plugins.md", tmp_path_factory)
    assert out.split() == ["loaded", "[0.", "2.]", "[0.5]", "True", "False"], out


@pytest.mark.parametrize("plugin", sorted(path.parent.name for path in PLUGIN_READMES))
def test_each_backend_page_is_its_plugins_readme(plugin: str) -> None:
    """docs/backends/NAME.md includes plugins/NAME_backend/README.md (whole or every section of it, in order) and
    adds nothing but comments and the charts; the README is its distribution's PyPI description, where a link
    into docs/ would not resolve, so it links nowhere relative (pages are named in text, charts shown by the page)."""
    readme = ROOT / "plugins" / plugin / "README.md"
    page = ROOT / "docs" / "backends" / f"{plugin.removesuffix('_backend')}.md"
    text = readme.read_text()
    includes = SNIPPET.findall(page.read_text())
    assert includes and {path for path, _ in includes} == {f"plugins/{plugin}/README.md"}, includes
    sections = re.findall(r"^<!-- --8<-- \[start:([\w-]+)\] -->$", text, flags=re.M)
    assert [section for _, section in includes] == (sections or [""]), (includes, sections)
    for section in sections:
        assert text.count(f"<!-- --8<-- [end:{section}] -->") == 1, section
    rest = SNIPPET.sub("", re.sub(r"<!--.*?-->", "", page.read_text(), flags=re.S))
    assert all(re.fullmatch(r"!\[[^]]+\]\(\.\./\w+\.png\)", line) for line in rest.split("\n") if line.strip()), rest
    assert not re.findall(r"\]\((?!https?://)[^)]*\)", text), "a relative link in a README shown on PyPI"
