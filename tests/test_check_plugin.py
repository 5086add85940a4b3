"""``algoswap check-plugin`` and the checks made at registration: each mistake a plugin author can make
is named, in ``check_plugin``'s report and in the command's exit code, and no rejected implementation
shows as offered (✓) in the capability matrix.

Each case is a plugin module written to a temporary directory, registered in-process into a fresh
registry (``PluginLoader.load``, as ``algoswap.register_plugin`` does) and, through
``algoswap check-plugin mine --module MODULE``, in a subprocess. A backend that cannot run here
("gone") is checked from its code: its modules are never imported, and that it cannot run is no
problem."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

import algoswap
from algoswap._capabilities import build
from algoswap._plugins import PluginLoader
from algoswap._records import PluginRecord
from algoswap._registry import Registry

HEADER = '''
import time


def algoswap_api_version():
    return ">=1.1,<2"


def relu(x):
    return x


def conv2d(input, weight, bias, *, stride, padding, dilation, groups, padding_mode):
    return input


def supports_conv(call):
    return call.attrs["stride"] == (1, 1) and call.shape("weight") is not None


def probe():
    return True
'''

# A library module the plugin refers to that imports badly: its names can be read from its code (caps cannot tell)
BROKEN_LIBRARY = '''
def relu(x):
    return x


raise ImportError("libmine.so: cannot open shared object file")
'''

# The implementations of backend "gone" (which cannot run here): read from this code, never imported
HEAVY = '''
def relu(x):
    return x


def leaky_relu(x, *, slope):
    return x


def _convolution(name):
    def conv2d(input, weight, bias, *, stride, padding, dilation, groups, padding_mode):
        return input

    return conv2d


def _misspelt(name):
    def conv2d(input, weight, bias, *, stride, paddng, dilation, groups, padding_mode):
        return input

    return conv2d


conv2d_fast = _convolution("fast")
conv2d_typo = _misspelt("typo")


def supports(call):
    return call.attrs["stride"] == (1, 1)


def supports_typo(call):
    return call.attrs["strides"] == (1, 1)
'''
# and one whose names its code cannot show: they may be there
DYNAMIC = '''
def _convolution(name):
    def conv2d(input, weight, bias, *, stride, padding, dilation, groups, padding_mode):
        return input

    return conv2d


globals().update({"conv2d_" + name: _convolution(name) for name in ("made",)})
'''
GONE = 'registry.add_backend("gone", probe=probe_gone); add = registry.add_implementation; '
GONE_CLEAN = (GONE + 'add("relu", "direct", "gone", "mine_heavy:relu"); '
              'add("conv2d", "fast", "gone", "mine_heavy:conv2d_fast", supports="mine_heavy:supports"); '
              'add("conv2d", "made", "gone", "mine_dynamic:conv2d_made")')


class Mistake(NamedTuple):
    body: str  # the plugin's algoswap_register, after it declares backend "mine"
    fragment: str  # what the report must say
    refused: bool  # at registration (else check-plugin finds it)
    unoffered: bool = True  # then shown as not offered (✗) in caps in the checking process


MISTAKES = {
    "unknown_dtype": Mistake('registry.add_implementation("relu", "direct", "mine", relu, dtypes=("float33",))',
                      "implementation ('relu', 'direct', 'mine'): dtypes 'float33' is not a dtype algoswap knows", True),
    "dtypes_as_a_string": Mistake('registry.add_implementation("relu", "direct", "mine", relu, dtypes="float32")',
                           "dtypes must be a sequence of dtype names, got the string 'float32'", True),
    "unknown_op": Mistake('registry.add_implementation("rleu", "direct", "mine", relu)', "unknown op 'rleu'; did you mean 'relu'", True),
    "unknown_layout": Mistake('registry.add_implementation("relu", "direct", "mine", relu, layout="nhwc")',
                       "layout must be one of contiguous, any, channels_last; got 'nhwc'", True),
    "malformed_reference": Mistake('registry.add_implementation("relu", "direct", "mine", "mine_pkg.relu")',
                            "fn 'mine_pkg.relu' is not a 'module:attribute' reference", True),
    "malformed_probe_reference": Mistake('registry.add_backend("other", probe="mine_pkg.probe")',
                                         "backend 'other': probe 'mine_pkg.probe' is not a 'module:attribute' reference", True),
    "predicate_not_callable": Mistake('registry.add_implementation("relu", "direct", "mine", relu, supports=3)',
                               "supports must be a callable, an algoswap.Ref or a 'module:attribute' string or None", True),
    "missing_attribute": Mistake('registry.add_implementation("relu", "direct", "mine", __name__ + ":rleu")',
                          "relu mine:direct: fn: cannot import its implementation", False),
    "import_fails": Mistake('registry.add_implementation("relu", "direct", "mine", "mine_broken_library:relu")',
                     "ImportError: libmine.so: cannot open shared object file", False),
    "not_a_callable": Mistake('registry.add_implementation("relu", "direct", "mine", __name__ + ":HEADER_CONSTANT")',
                       "relu mine:direct: fn: its implementation", False),
    "signature_lacks_an_attribute": Mistake('registry.add_implementation("leaky_relu", "direct", "mine", relu)',
                                     "leaky_relu mine:direct: fn: relu(x) cannot take a leaky_relu call: it does not take leaky_relu's attribute 'negative_slope'", False),
    "signature_has_a_misspelt_attribute": Mistake(
        'registry.add_implementation("conv2d", "direct", "mine", lambda input, weight, bias, *, stride, paddng, dilation, '
        'groups, padding_mode: input)', "it does not take conv2d's attribute 'padding'; it requires 'paddng', which conv2d "
        "does not pass", False),
    "predicate_reads_an_unknown_attribute": Mistake(
        'registry.add_implementation("conv2d", "direct", "mine", conv2d, supports=supports_typo)',
        "reads attribute 'strides', which no op it serves has (conv2d:", False, unoffered=False),
    "predicate_reads_an_unknown_input": Mistake(
        'registry.add_implementation("conv2d", "direct", "mine", conv2d, supports=supports_typo)',
        "reads input 'weights', which no op it serves has", False, unoffered=False),
    "slow_probe": Mistake('registry.add_backend("slow", probe=slow_probe)', "backend 'slow': probe: took ", False),
    "gone_missing_attribute": Mistake(GONE + 'add("relu", "direct", "gone", "mine_heavy:rleu")',
                                      "relu gone:direct: fn: cannot import its implementation 'mine_heavy:rleu' (plugin 'mine'): "
                                      "AttributeError: module 'mine_heavy' has no attribute 'rleu'", False),
    "gone_missing_module": Mistake(GONE + 'add("relu", "direct", "gone", "mine_haevy:relu")',
                                   "ModuleNotFoundError: No module named 'mine_haevy'", False),
    "gone_signature": Mistake(GONE + 'add("leaky_relu", "direct", "gone", "mine_heavy:leaky_relu")',
                              "leaky_relu gone:direct: fn: leaky_relu(x, *, slope) cannot take a leaky_relu call: it does not "
                              "take leaky_relu's attribute 'negative_slope'; it requires 'slope'", False),
    "gone_signature_of_a_factory_s_function": Mistake(
        GONE + 'add("conv2d", "typo", "gone", "mine_heavy:conv2d_typo")', "conv2d gone:typo: fn: conv2d_typo(input, weight, bias, "
        "*, stride, paddng, dilation, groups, padding_mode) cannot take a conv2d call: it does not take conv2d's attribute "
        "'padding'", False),
    "gone_predicate_reads_an_unknown_attribute": Mistake(
        GONE + 'add("conv2d", "fast", "gone", "mine_heavy:conv2d_fast", supports="mine_heavy:supports_typo")',
        "supports() mine_heavy:supports_typo of backend 'gone': supports: reads attribute 'strides'", False, unoffered=False),
    "gone_missing_predicate": Mistake(GONE + 'add("relu", "direct", "gone", "mine_heavy:relu", supports="mine_heavy:suports")',
                                      "relu gone:direct: supports: cannot import its supports() predicate 'mine_heavy:suports'", False),
    "gone_missing_memory_function": Mistake(
        'registry.add_backend("gone", probe=probe_gone, memory=__import__("algoswap").MemorySpace("boxes", "numpy.ndarray", '
        'to_host="mine_heavy:to_hots"))', "backend 'gone': memory: cannot import its memory space's to_host 'mine_heavy:to_hots'",
        False),
    "gone_missing_probe": Mistake('registry.add_backend("gone", probe=__name__ + ":probe_gnoe")',
                                  "backend 'gone': probe: cannot import its availability probe", False),
}
FOOTER = '''
HEADER_CONSTANT = 3


def supports_typo(call):
    return call.attrs["strides"] == (1, 1) and call.shape("weights") is not None


def slow_probe():
    time.sleep(0.3)  # past check-plugin's 100 ms, whatever the machine's load
    return True


def probe_gone():
    return "no mine device here"
'''


def _write_plugin(directory: Path, case: str, body: str, api: str = ">=1.1,<2") -> str:
    """The module of a plugin registering backend "mine" then ``body``; returns its name."""
    module = f"mine_case_{case}"
    register = f'\ndef algoswap_register(registry):\n    registry.add_backend("mine", probe=probe)\n    {body}\n'
    source = HEADER.replace(">=1.1,<2", api) + register + FOOTER
    (directory / f"{module}.py").write_text(source)
    (directory / "mine_broken_library.py").write_text(textwrap.dedent(BROKEN_LIBRARY))
    (directory / "mine_heavy.py").write_text(HEAVY)
    (directory / "mine_dynamic.py").write_text(DYNAMIC)
    return module


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _registry_with(module: str, state: Path) -> Registry:
    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": "numpy", "ALGOSWAP_STATE_DIR": str(state)})
    loader.discover()
    plugin: ModuleType = importlib.import_module(module)
    loader.load(plugin, PluginRecord("mine"))
    return registry


def _offered(registry: Registry) -> list[str]:
    """Every (op, algorithm) of backend "mine" or "gone" the matrix shows as offered."""
    matrix = build(registry)
    return [f"{op} {algorithm}" for op, table in matrix.tables.items() for backend in ("mine", "gone")
            for algorithm, cell in table.rows.get(backend, {}).items() if cell.supported]


@pytest.mark.parametrize("case", list(MISTAKES))
def test_each_mistake_is_a_named_problem_of_check_plugin(case: str, plugin_dir: Path) -> None:
    mistake = MISTAKES[case]
    registry = _registry_with(_write_plugin(plugin_dir, case, mistake.body), plugin_dir / "state")
    report = algoswap.check_plugin("mine", registry=registry)
    assert not report.ok and any(mistake.fragment in str(problem) for problem in report.problems), report.to_text()
    assert (report.status == "broken") == mistake.refused, report.to_text()
    assert not {"mine_heavy", "mine_dynamic"} & set(sys.modules), f"{case}: the modules of a backend that cannot run here were imported"
    if mistake.refused:
        assert "mine" not in build(registry).backends, f"{case}: a refused registration is in the matrix"
    assert not _offered(registry) or not mistake.unoffered, f"{case}: caps shows a rejected implementation as offered"


def test_a_reference_found_not_to_resolve_is_shown_as_refused_in_caps(plugin_dir: Path) -> None:
    body = MISTAKES["import_fails"].body
    registry = _registry_with(_write_plugin(plugin_dir, "import_fails_caps", body), plugin_dir / "state")
    assert _offered(registry) == ["relu direct"]  # its module's code binds relu: nothing tells before the import
    algoswap.check_plugin("mine", registry=registry)
    cell = build(registry, op="relu").tables["relu"].rows["mine"]["direct"]
    assert not cell.supported and "libmine.so: cannot open shared object file" in str(cell.reason)


def test_a_backend_that_cannot_run_here_is_checked_from_its_code_and_is_no_problem(plugin_dir: Path) -> None:
    """Its references and signatures read without importing its modules: one made by a factory judged, one
    made through globals() (its code cannot show it) taken as it may be, never called broken."""
    registry = _registry_with(_write_plugin(plugin_dir, "gone_clean", GONE_CLEAN), plugin_dir / "state")
    report = algoswap.check_plugin("mine", registry=registry)
    assert report.ok and report.implementations == 3, report.to_text()
    gone = next(b for b in report.backends if b.name == "gone")
    assert (gone.status, gone.reason, gone.from_code, gone.implementations) == ("unavailable", "no mine device here", True, 3)
    assert "  cannot run here: 3 implementations checked from their code, unimported" in report.to_text()
    assert not {"mine_heavy", "mine_dynamic"} & set(sys.modules)
    assert sorted(_offered(registry)) == ["conv2d fast", "conv2d made", "relu direct"]


def test_the_command_passes_a_backend_that_cannot_run_here(tmp_path: Path) -> None:
    done = _cli("mine", "--module", _write_plugin(tmp_path, "gone_clean_cli", GONE_CLEAN), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "backend gone: unavailable" in done.stdout and done.stdout.rstrip().endswith("ok: no problem found")


def test_an_incompatible_api_range_is_a_problem_naming_both_versions(plugin_dir: Path) -> None:
    module = _write_plugin(plugin_dir, "old_api", "pass", api=">=2,<3")
    report = algoswap.check_plugin("mine", registry=_registry_with(module, plugin_dir / "state"))
    assert report.status == "incompatible" and report.api_range == ">=2,<3"
    assert f"supports core API >=2,<3; this core is API {algoswap.API_VERSION}" in str(report.problems[0])


def test_a_clean_plugin_has_no_problem_and_its_probe_is_timed(plugin_dir: Path) -> None:
    body = 'registry.add_implementation("conv2d", "direct", "mine", conv2d, supports=supports_conv)'
    report = algoswap.check_plugin("mine", registry=_registry_with(_write_plugin(plugin_dir, "clean", body), plugin_dir / "state"))
    assert report.ok, report.to_text()
    assert report.implementations == 1 and report.backends[0].probe_seconds is not None
    assert report.to_text().endswith("ok: no problem found")


def test_the_reference_plugin_passes() -> None:
    report = algoswap.check_plugin("numpy")
    assert report.ok, report.to_text()
    assert report.distribution == "algoswap-numpy" and report.implementations > 100


def test_an_unknown_plugin_name_is_a_problem_with_suggestions() -> None:
    report = algoswap.check_plugin("nmupy")
    assert not report.ok and "did you mean 'numpy'" in str(report.problems[0])


def _cli(*args: str, cwd: Path, allow: str = "mine") -> subprocess.CompletedProcess[str]:
    """``algoswap check-plugin ARGS`` with only the installed plugins ``allow`` discovered (a plugin given by
    ``--module`` is registered whatever it is called)."""
    path = os.pathsep.join(filter(None, (str(cwd), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, "ALGOSWAP_PLUGINS": allow, "ALGOSWAP_STATE_DIR": str(cwd / "state")}
    return subprocess.run([sys.executable, "-m", "algoswap", "check-plugin", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.mark.parametrize("case", list(MISTAKES))
def test_each_mistake_fails_the_command(case: str, tmp_path: Path) -> None:
    mistake = MISTAKES[case]
    done = _cli("mine", "--module", _write_plugin(tmp_path, case, mistake.body), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert mistake.fragment in done.stdout and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_command_passes_a_clean_plugin(tmp_path: Path) -> None:
    done = _cli("numpy", cwd=tmp_path, allow="numpy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("plugin numpy (algoswap-numpy ")
    assert done.stdout.rstrip().endswith("ok: no problem found")


def test_a_module_that_does_not_import_fails_the_command_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "mine_raising.py").write_text('raise RuntimeError("boom at import")\n')
    done = _cli("mine", "--module", "mine_raising", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "problem: plugin 'mine': module: --module 'mine_raising' does not import: RuntimeError: boom at import" in done.stdout
