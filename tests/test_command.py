"""The ``algoswap`` command as a user meets it: a mistake is a usage error (status 2, no traceback),
a closed pipe ends it quietly, every option says what it is for, ``ops`` shows the values attributes take.

The command is run in a new process where its exit status or its stdout's pipe is the point, in this
one (``main``) otherwise. The plugin system's own CLI tests, with throwaway plugins, are in
plugin_system/test_cli.py."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from algoswap._cli import SIGPIPE_STATUS, main, parser
from algoswap._global import get_registry
from algoswap._specs._convert import choice, expected, optional
from algoswap._specs.conv import PADDING_MODES
from helpers import HANG_SECONDS


def run_command(*args: str, stdout: Any = subprocess.PIPE, **env: str) -> subprocess.CompletedProcess[str]:
    kept = ("ALGOSWAP_STATE_DIR", "ALGOSWAP_CACHE_DIR")  # conftest's
    full = {k: v for k, v in os.environ.items() if not k.startswith("ALGOSWAP_") or k in kept}
    return subprocess.run([sys.executable, "-m", "algoswap", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env={**full, **env}, timeout=HANG_SECONDS)


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What ``algoswap ARGS`` says on stderr, checked to be argparse's usage error (status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    out, err = capsys.readouterr()
    assert (stopped.value.code, out) == (2, ""), (out, err)
    assert err.startswith(f"usage: algoswap {args[0]}") and "Traceback" not in err, err
    return err.splitlines()[-1]


def test_an_unknown_model_is_a_usage_error_before_the_demo_prints_anything() -> None:
    done = run_command("demo", "--model", "nope")
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("algoswap demo: error: argument --model: unknown model 'nope'; known models: convnet")


@pytest.mark.parametrize("option, value", [("--batch", "0"), ("--repeats", "0"), ("--batch", "-3"), ("--repeats", "two")])
def test_demo_counts_must_be_positive_ints(capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    assert usage_error(capsys, "demo", option, value) == f"algoswap demo: error: argument {option}: expected an int >= 1, got {value!r}"


def test_an_unknown_model_of_a_foreign_library_suggests_close_ones(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from algoswap._zoo_foreign import import_library

    try:
        import_library("torchvision")
    except ValueError as exc:
        pytest.skip(str(exc))
    message = usage_error(capsys, "demo", "--model", "torchvision:resnet1")
    assert message.startswith("algoswap demo: error: argument --model: zoo: torchvision has no model 'resnet1'; did you mean ")
    assert "'resnet18'" in message


@pytest.mark.parametrize("args, expected", [
    (("caps", "--op", "conv2"), "algoswap caps: error: argument --op: unknown op 'conv2'; did you mean 'conv2d'?"),
    (("ops", "conv2"), "algoswap ops: error: argument NAME: unknown op 'conv2'; did you mean 'conv2d'?"),
])
def test_an_unknown_op_is_a_usage_error_with_close_names(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                                         expected: str) -> None:
    assert usage_error(capsys, *args) == expected


def test_an_unknown_backend_is_a_usage_error_listing_the_installed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "caps", "--backend", "nump")
    installed = ", ".join(get_registry().backends)
    assert message == f"algoswap caps: error: argument --backend: unknown backend 'nump' (known backends: {installed}); did you mean 'numpy'?"


def test_retry_of_a_name_no_plugin_has_is_a_usage_error_naming_the_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "retry", "numpy", "nump")
    assert message.startswith("algoswap retry: error: argument NAME: unknown plugin 'nump' (known plugins: "), message
    assert "numpy (algoswap-numpy)" in message and message.endswith("; did you mean 'numpy'?"), message


@pytest.mark.parametrize("name", ["numpy", "algoswap-numpy", "Algoswap_NumPy"])
def test_retry_of_an_installed_plugin_is_no_error(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert main(["retry", name]) == 0
    assert capsys.readouterr().out.startswith(("nothing to retry", "forgot the faults of"))


def test_new_plugin_into_a_missing_folder_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    assert usage_error(capsys, "new-plugin", "mine", "--dir", missing) == (
        f"algoswap new-plugin: error: argument --dir: {missing!r} is not a folder")


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """As ``algoswap caps --full | head`` does: the reader is gone before the command writes."""
    read, write = os.pipe()
    os.close(read)  # before the child starts: its first write fails, whatever the timing
    try:
        done = run_command("caps", "--full", stdout=write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (SIGPIPE_STATUS, "")


def test_caps_is_the_summary_with_its_legend_unless_full(capsys: pytest.CaptureFixture[str]) -> None:
    from algoswap._capabilities import LEGEND, SUMMARY_LEGEND

    assert main(["caps", "--op", "relu"]) == 0
    summary = capsys.readouterr().out
    assert summary.splitlines()[0].split()[0] == "op" and SUMMARY_LEGEND in summary and LEGEND not in summary
    assert main(["caps", "--op", "relu", "--full"]) == 0
    full = capsys.readouterr().out
    assert full.splitlines()[:2] == ["relu", full.splitlines()[1]] and full.splitlines()[1].split()[0] == "backend"
    assert full.rstrip().endswith(LEGEND)
    assert main(["caps", "--op", "relu", "--format", "text"]) == 0
    assert capsys.readouterr().out == full


def test_caps_full_and_format_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(capsys, "caps", "--full", "--format", "json").endswith("not allowed with argument --full")


def test_ops_shows_the_values_each_attribute_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "conv2d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    after_mode = lines[[i for i, line in enumerate(lines) if line.split()[:1] == ["padding_mode"]][0] + 1]
    assert after_mode.split() == ["takes", "one", "of", *[f"{mode!r}," for mode in PADDING_MODES[:-1]], repr(PADDING_MODES[-1])]


def test_every_attribute_of_every_op_says_what_it_takes() -> None:
    """For ``algoswap ops``: a converter without ``expecting`` would show nothing."""
    silent = [f"{spec.name}.{attr.name}" for spec in get_registry().ops.values() for attr in spec.attrs if not expected(attr.convert)]
    assert not silent


def test_converters_say_what_they_take_as_their_errors_do() -> None:
    take = optional(choice("a", "b"))
    with pytest.raises(ValueError) as refused:
        take("c")
    assert str(refused.value) == expected(take) == "None or one of 'a', 'b'"


def test_every_subcommand_and_option_has_help() -> None:
    commands = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)][0]
    helped = {choice.dest for choice in commands._choices_actions if choice.help}
    assert helped == set(commands.choices), set(commands.choices) - helped
    for name, sub in commands.choices.items():
        silent = [a.dest for a in sub._actions if not a.help]
        assert not silent, f"algoswap {name}: options without help: {silent}"
