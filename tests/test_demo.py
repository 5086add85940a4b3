"""``algoswap demo``'s report: the main table first (a verdict against torch per run, with the tolerance
policy's bound), one line per backend, the explanation of the fastest run, the matrix only on request,
slow reference algorithms skipped and named. On the small convnet, one timed run each: a few seconds."""

from __future__ import annotations

import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from algoswap._cli import main  # noqa: E402
from helpers import network_terms, tolerance  # noqa: E402

DEMO = ["demo", "--model", "convnet", "--small", "--repeats", "1"]
ROW = re.compile(r"^(?P<run>\S.*?)\s{2,}(?P<layers>all|\d+/\d+)\s+(?P<error>\S+)\s+"
                 r"(?P<verdict>reference|pass|fail)(?: \(<= (?P<bound>\S+)\))?\s+(?P<ms>[\d.]+)\s")
EXPLAINED = re.compile(r"^== explain: the fastest run, (?P<run>.+) \((?P<ms>[\d.]+) ms\)")


def demo(capsys: Any, *flags: str) -> tuple[str, str]:
    assert main(DEMO + list(flags)) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def table(out: str) -> dict[str, dict[str, str]]:
    return {m["run"]: m.groupdict() for m in map(ROW.match, out.splitlines()) if m}


def section(out: str, title: str) -> list[str]:
    """The lines of the section whose header starts with "== TITLE", up to the next one."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    return lines[start:end]


def available_algorithms() -> set[str]:
    registry = algoswap.registry()
    return {i.qualified for i in registry.implementations("conv2d") if registry.backends[i.backend].availability() is True}


def test_demo_prints_the_table_first_with_verdicts_by_the_policys_bound(capsys: Any) -> None:
    out, err = demo(capsys)
    rows = table(out)
    first = out.index("conv layers")
    assert first < out.index("== backends") < out.index("== explain"), out
    assert "capability matrix" not in out and "conv2d_grad_input" not in out, "the matrix is shown only with --matrix"
    terms = network_terms(zoo.build("convnet"))
    bound = tolerance("float32", **terms) * 2  # the result's rounding and the float32 reference's
    assert rows["torch (F.conv2d)"]["verdict"] == "reference"
    algorithms = {run for run in rows if ":" in run}
    assert algorithms and algorithms <= available_algorithms()
    for run, row in rows.items():
        if row["verdict"] != "reference":
            assert row["verdict"] == "pass", f"{run}: {row}"
            assert float(row["bound"]) == pytest.approx(bound, rel=0.05), f"{run}: {row} (policy: {bound:.2e})"
    assert "measuring convnet" in err and re.search(r"(\d+)/\1 ", err), f"no progress on stderr: {err!r}"


def test_demo_lists_every_backend_once(capsys: Any) -> None:
    out, _ = demo(capsys)
    lines = section(out, "backends")[1:]
    for name, record in algoswap.registry().backends.items():
        mine = [line for line in lines if line.split()[:1] == [name]]
        assert len(mine) == 1, f"{name}: {lines}"
        status = "available" if record.availability() is True else f"unavailable: {record.availability()}"
        assert status in mine[0], mine[0]


def test_demo_explains_the_fastest_run_once_per_reason_without_backward(capsys: Any) -> None:
    out, _ = demo(capsys)
    rows = table(out)
    explained = section(out, "explain")
    named = EXPLAINED.match(explained[0])
    assert named and named["run"] in rows, explained[0]
    timed = [float(r["ms"]) for r in rows.values() if r["verdict"] == "pass"]
    assert float(rows[named["run"]]["ms"]) == min(timed), (named["run"], rows)
    assert "backward" not in explained[1], f"an inference demo has no backward column: {explained[1]}"
    reasons = [line.strip() for line in explained if line.strip().startswith("rejected")]
    assert len(reasons) == len(set(reasons)), "\n".join(reasons)


def test_demo_skips_slow_algorithms_and_names_them(capsys: Any) -> None:
    if "numpy:fft" not in available_algorithms():
        pytest.skip("the NumPy backend is not installed")
    out, _ = demo(capsys)
    assert "numpy:fft" not in table(out)
    skipped = [line for line in out.splitlines() if line.startswith("skipped as slow")]
    assert len(skipped) == 1 and "numpy:fft" in skipped[0] and "--slow" in skipped[0], out


def test_demo_with_matrix_and_slow_shows_both(capsys: Any) -> None:
    out, _ = demo(capsys, "--matrix", "--slow")
    assert out.index("== explain") < out.index("== capability matrix")
    assert "conv2d_grad_input" in "\n".join(section(out, "capability matrix"))
    assert not any(line.startswith("skipped as slow") for line in out.splitlines())
    if "numpy:fft" in available_algorithms():
        assert table(out)["numpy:fft"]["verdict"] == "pass"


def test_explanation_prints_each_reason_once_and_no_backward_on_request() -> None:
    from algoswap._torch.explain import Explanation, Row

    reason = "backend unavailable: no CUDA driver"
    rejected = {"conv1": ["cuda:fft", "cuda:smm"], "conv2": ["cuda:fft", "cuda:smm"], "fc": ["cuda:gemm"]}
    rows = Explanation(Row(name, "conv2d", (1, 3, 8, 8), "default", "numpy:smm", "gemm", [f"{c}: {reason}" for c in names],
                           ["dx by numpy:direct (fallback)"]) for name, names in rejected.items())
    assert str(rows).count(reason) == 3 and "backward" in str(rows).splitlines()[0]  # explain()'s default: per layer
    text = rows.to_text(backward=False, notes_once=True)
    assert text.count(reason) == 1 and f"cuda (3 algorithms) on 3 layers: {reason}" in text, text
    assert "backward" not in text, text
