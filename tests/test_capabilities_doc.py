"""docs/capabilities.md is the registry's: regenerated here in memory, it must equal the committed page."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from algoswap import capabilities_doc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "capabilities.md"


@pytest.fixture(scope="module")
def generated() -> str:
    missing = capabilities_doc.missing_distributions()
    if missing:
        pytest.skip(f"the page documents every plugin of the repository; not installed: {', '.join(missing)}")
    return capabilities_doc.render()


def test_the_committed_page_is_the_registrys(generated: str) -> None:
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if committed != generated:
        diff = "".join(list(difflib.unified_diff(committed.splitlines(True), generated.splitlines(True),
                                                 "docs/capabilities.md (committed)", "generated", n=1))[:40])
        pytest.fail(f"docs/capabilities.md is stale: refresh it with\n    {capabilities_doc.COMMAND}\n"
                    f"(from the repository root) and commit it. The first differences:\n{diff}", pytrace=False)


def test_the_page_holds_only_what_the_repositorys_plugins_declare(generated: str) -> None:
    """Declared, not available: the CUDA backend's tables are there without a GPU, the oneDNN bfloat16 dtypes without
    a CPU that runs them; a plugin installed from elsewhere (the example C++ plugin, in CI) is not."""
    assert "| `cuda:guess` | bfloat16, float16, float32 | any | spreads | 20 |" in generated
    assert "| `dnnl:auto` | bfloat16, float32 | channels_last | exact | 20 |" in generated
    assert "- `dnnl:winograd`: oneDNN 3.2 has no f32 Winograd convolution" in generated
    assert "cppconv" not in generated and "(unavailable)" not in generated and "no CUDA driver" not in generated
    assert capabilities_doc.COMMAND in generated.split("\n\n")[1]  # said at the top of the page


def test_the_check_says_how_to_refresh_a_stale_page(generated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "capabilities.md"
    page.write_text(generated.replace("spreads", "exact", 1), encoding="utf-8")
    assert capabilities_doc.main(["--check", str(page)]) == 1
    assert f"stale: refresh it with {capabilities_doc.COMMAND}" in capsys.readouterr().err
    assert capabilities_doc.main([str(page)]) == 0 and page.read_text(encoding="utf-8") == generated
    assert capabilities_doc.main(["--check", str(page)]) == 0
