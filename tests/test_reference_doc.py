"""docs/reference.md is the code's: regenerated here in memory from the docstrings and signatures, it must equal
the committed page."""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path

import pytest

from algoswap import hookspecs, reference_doc
from algoswap._registry import Registrar

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


@pytest.fixture(scope="module")
def generated() -> str:
    return reference_doc.render()


def test_the_committed_page_is_the_codes(generated: str) -> None:
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if committed != generated:
        diff = "".join(list(difflib.unified_diff(committed.splitlines(True), generated.splitlines(True),
                                                 "docs/reference.md (committed)", "generated", n=1))[:40])
        pytest.fail(f"docs/reference.md is stale: refresh it with\n    {reference_doc.COMMAND}\n"
                    f"(from the repository root) and commit it. The first differences:\n{diff}", pytrace=False)


def test_every_hook_and_registrar_method_is_on_the_page_with_a_docstring(generated: str) -> None:
    hooks = [name for name, fn in vars(hookspecs).items() if inspect.isfunction(fn) and name.startswith("algoswap_")]
    assert hooks == ["algoswap_api_version", "algoswap_register"]
    for hook in hooks:
        assert f"### `{hook}`" in generated
    for method in reference_doc.REGISTRAR_METHODS:
        assert f"### `registry.{method}`" in generated
    public = {name for name in vars(Registrar) if not name.startswith("_")} | {"plugin"}
    unlisted = public - set(reference_doc.REGISTRAR_METHODS) - set(reference_doc.REGISTRAR_INTERNAL)
    assert not unlisted, (f"Registrar has public members neither in REGISTRAR_METHODS (on the page) nor in "
                          f"REGISTRAR_INTERNAL: {sorted(unlisted)}")
    assert "*(no docstring)*" not in generated  # every hook, method, type and member rendered says what it is
    assert reference_doc.COMMAND in generated.split("\n\n")[1]  # said at the top of the page


def test_signatures_keep_their_type_hints_and_stable_defaults(generated: str) -> None:
    assert "    memory: MemorySpace = algoswap.HOST,\n" in generated
    assert "    fn: RefLike,\n" in generated and ") -> ImplRecord\n" in generated
    assert "algoswap_register(registry: Registrar) -> None" in generated
    assert "| `dtypes` | `frozenset[str]` | `frozenset({'float32', 'float64'})` |" in generated
    assert " at 0x" not in generated and "<function" not in generated


def test_the_check_says_how_to_refresh_a_stale_page(generated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "reference.md"
    page.write_text(generated.replace("Declare a backend", "Declare a frontend", 1), encoding="utf-8")
    assert reference_doc.main(["--check", str(page)]) == 1
    assert f"stale: refresh it with {reference_doc.COMMAND}" in capsys.readouterr().err
    assert reference_doc.main([str(page)]) == 0 and page.read_text(encoding="utf-8") == generated
    assert reference_doc.main(["--check", str(page)]) == 0
