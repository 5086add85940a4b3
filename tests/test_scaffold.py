"""``algoswap new-plugin``: what it writes, what it refuses, and that examples/cpp_plugin is what it writes.

Building and installing what it writes, in a fresh venv, is .ci/plugin_e2e.sh (run by ``make test``).
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import algoswap
from algoswap._cli import main
from algoswap._plugins import PluginLoader
from algoswap._records import PluginRecord
from algoswap._registry import Registry
from algoswap._scaffold import FLAVOURS, ScaffoldError, new_plugin, render
from helpers import fail, mismatch
from algoswap.testing._cases import bind, cases_for, draw, reference_name

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cpp_plugin"
# the example's own files: its kernel and its README (the rest is exactly what new-plugin --cpp writes)
EXAMPLE_OWN = {"src/conv.cpp", "README.md"}
TEST_FILE = 'import algoswap.testing\ndef test_conformance():\n    algoswap.testing.assert_conformant("{name}")\n'


@pytest.mark.parametrize("cpp", [False, True], ids=["python", "cpp"])
def test_writes_a_distribution_with_the_agreed_names(tmp_path: Path, cpp: bool) -> None:
    target = new_plugin("mine", cpp=cpp, directory=tmp_path)
    assert target == tmp_path / "algoswap-mine"
    project = tomllib.loads((target / "pyproject.toml").read_text())
    assert project["project"]["name"] == "algoswap-mine"
    assert project["project"]["entry-points"]["algoswap.backends"] == {"mine": "algoswap_mine"}
    assert any(r.startswith("algoswap>=") for r in project["project"]["dependencies"])
    assert (target / "tests" / "test_mine_conformance.py").read_text() == TEST_FILE.format(name="mine")
    readme = (target / "README.md").read_text()
    for command in ("pip install .", "algoswap check-plugin mine", "python -m algoswap.testing mine", "twine upload"):
        assert command in readme
    assert "{{" not in "".join(p.read_text() for p in target.rglob("*") if p.is_file())
    for source in target.rglob("*.py"):
        compile(source.read_text(), str(source), "exec")


def test_the_python_plugin_registers_and_matches_the_reference(tmp_path: Path, rng: np.random.Generator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded as discovery loads it, on a registry of its own; its conv2d on every conformance case."""
    new_plugin("scaffoldtest", directory=tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "algoswap-scaffoldtest"))
    plugin = importlib.import_module("algoswap_scaffoldtest")
    registry = Registry()
    record = PluginLoader(registry).load(plugin, PluginRecord("scaffoldtest"))
    assert record.status == "loaded", record.error
    impl = registry.impls[("conv2d", "direct", "scaffoldtest")]
    assert impl.kernel == "numpy im2col + matmul" and impl.dtypes == {"float32", "float64"}
    conv = importlib.import_module("algoswap_scaffoldtest.conv").conv2d_direct
    problems = []
    for index, (shapes, attrs) in enumerate(cases_for("conv2d")):
        call = bind("conv2d", shapes, "float64", attrs)
        inputs = [draw(rng, s, "float64") for s in shapes]
        expected = algoswap.ops.call("conv2d", *inputs, algorithm=reference_name("conv2d"), **attrs)
        problem = mismatch(conv(*inputs, **call.attrs), expected, reduction_length=int(np.prod(shapes[1][1:])))
        if problem:
            problems.append(f"case {index} {shapes} {attrs}: {problem}")
    if problems:
        fail("\n".join(problems))
    for name in [m for m in sys.modules if m.startswith("algoswap_scaffoldtest")]:
        del sys.modules[name]


@pytest.mark.parametrize("name, expected", [
    ("My-Plugin", "must be a lower-case identifier"), ("2fast", "must be a lower-case identifier"),
    ("", "must be a lower-case identifier"), ("numpy", "is taken: it is the entry point of the installed plugin"),
    ("dnnl", "is taken"),
])
def test_refuses_bad_and_taken_names(tmp_path: Path, name: str, expected: str) -> None:
    with pytest.raises(ScaffoldError, match=expected):
        new_plugin(name, directory=tmp_path)
    assert not any(tmp_path.iterdir())


def test_refuses_an_existing_folder(tmp_path: Path) -> None:
    (tmp_path / "algoswap-mine").mkdir()
    (tmp_path / "algoswap-mine" / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="algoswap-mine already exists"):
        new_plugin("mine", directory=tmp_path)
    assert [p.name for p in (tmp_path / "algoswap-mine").iterdir()] == ["keep.txt"]


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-plugin", "mine", "--cpp", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"pip install {tmp_path / 'algoswap-mine'}" in out and "python -m algoswap.testing mine" in out
    assert (tmp_path / "algoswap-mine" / "CMakeLists.txt").is_file()
    assert main(["new-plugin", "mine", "--dir", str(tmp_path)]) == 2
    assert "algoswap: error: new-plugin:" in capsys.readouterr().err


def test_the_cpp_example_is_what_new_plugin_writes() -> None:
    """examples/cpp_plugin is `algoswap new-plugin cppconv --cpp` with its own kernel and README: every other
    file must stay as the template writes it (else fix the template, or the example, to agree)."""
    written = render("cppconv", FLAVOURS["cpp"])
    assert EXAMPLE_OWN <= set(written)
    drifted = [path for path, text in written.items()
               if path not in EXAMPLE_OWN and (EXAMPLE / path).read_text() != text]
    assert not drifted, f"examples/cpp_plugin differs from new-plugin's cpp template in {drifted}"
