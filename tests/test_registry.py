"""Selection, availability, memory spaces, tracing and plugin-declared ops, through in-process plugins."""

from __future__ import annotations

import json
import re
import sys
import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap._plugins import PluginLoader, api_version_matches
from algoswap._records import PluginRecord
from algoswap._registry import Registry
from algoswap._select import select
from boxed_backend import Box
from helpers import assert_close


def make_plugin(register: Any, api: str = ">=1,<2") -> types.SimpleNamespace:
    return types.SimpleNamespace(algoswap_api_version=lambda: api, algoswap_register=lambda registry: register(registry))


def fresh_registry(*plugins: Any) -> Registry:
    """A registry with the installed plugins plus the given in-process ones."""
    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": "numpy"})  # mechanics, not whatever else is installed
    loader.discover()
    for index, plugin in enumerate(plugins):
        loader.load(plugin, PluginRecord(f"inline{index}", distribution=f"inline-dist-{index}", version="9.9"))
    return registry


@pytest.fixture
def global_plugin() -> Iterator[Any]:
    """Load plugins into the process-wide registry; rediscover afterwards so other tests see a clean one."""
    yield algoswap.register_plugin
    algoswap.reload_plugins()


def relu_plus(shift: float) -> Any:
    return lambda x: np.maximum(x, 0) + np.asarray(shift, dtype=x.dtype)


def test_default_takes_the_best_ranked_backend_and_explicit_requests_are_honoured() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("fast", priority=10)
        registry.add_implementation("relu", "vector", "fast", relu_plus(0))

    registry = fresh_registry(make_plugin(register))
    shapes, dtypes = [(2, 3)], ["float32"]
    assert select(registry, "relu", shapes, dtypes).impl.qualified == "fast:vector"
    assert select(registry, "relu", shapes, dtypes, algorithm="numpy:direct").impl.qualified == "numpy:direct"
    assert select(registry, "relu", shapes, dtypes, algorithm="direct").impl.qualified == "numpy:direct"
    assert select(registry, "relu", shapes, dtypes, algorithm="numpy:default").impl.qualified == "numpy:direct"


def test_a_refusing_implementation_is_skipped_by_default_but_never_replaces_an_explicit_request() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("picky", priority=10)
        registry.add_implementation("relu", "small", "picky", relu_plus(0),
                                    supports=lambda call: True if call.out_shape[-1] <= 4 else "only rows of at most 4")

    registry = fresh_registry(make_plugin(register))
    chosen = select(registry, "relu", [(2, 8)], ["float64"])
    assert chosen.impl.qualified == "numpy:direct"
    assert chosen.rejected == (("picky:small", "only rows of at most 4"),)
    with pytest.raises(algoswap.NoImplementationError, match="picky:small: only rows of at most 4"):
        select(registry, "relu", [(2, 8)], ["float64"], algorithm="picky:small")


def test_selection_is_cached_until_the_registry_changes() -> None:
    registry = fresh_registry()
    first = select(registry, "conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), None], ["float32", "float32", None], {"padding": [1, 1]})
    again = select(registry, "conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), None], ["float32", "float32", None], {"padding": (1, 1)})
    assert first is again
    PluginLoader(registry, env={}).load(make_plugin(lambda r: r.add_backend("other")), PluginRecord("late"))
    assert not registry.selection_cache


def test_unavailable_backend_is_a_reason_and_a_raising_probe_never_crashes() -> None:
    calls = []

    def probe() -> str:
        calls.append(1)
        return "no such device on this machine"

    def register(registry: Any) -> None:
        registry.add_backend("away", probe=probe, priority=10)
        registry.add_backend("crashy", probe=lambda: 1 / 0, priority=10)
        registry.add_implementation("relu", "direct", "away", relu_plus(0))
        registry.add_implementation("relu", "direct", "crashy", relu_plus(0))

    registry = fresh_registry(make_plugin(register))
    chosen = select(registry, "relu", [(3,)], ["float32"])
    assert chosen.impl.qualified == "numpy:direct"
    reasons = dict(chosen.rejected)
    assert reasons["away:direct"] == "backend unavailable: no such device on this machine"
    assert reasons["crashy:direct"].startswith("backend unavailable: availability probe raised ZeroDivisionError")
    select(registry, "relu", [(4,)], ["float32"])
    assert len(calls) == 1, "availability probes are cached"
    matrix = algoswap.CapabilityMatrix  # the matrix marks them too
    built = __import__("algoswap._capabilities", fromlist=["build"]).build(registry, op="relu")
    assert isinstance(built, matrix)
    for text in (built.to_text(), built.to_summary(), built.to_markdown(), built.to_rst()):  # marked in the rows,
        assert "away (unavailable)" in text and text.count("no such device on this machine") == 1, text  # why: once
    assert built.unavailable()["away"] == "no such device on this machine"
    assert built.backends_for("relu", "direct", available=True) == ["numpy"]


class Boxed(Box):
    """The array type of a memory space that is not host memory (like a device array would be)."""


BOXED = algoswap.MemorySpace("boxed", "test_registry.Boxed", to_host=lambda b: b.data, from_host=lambda a: Boxed(a.copy()))


def _boxed_plugin() -> Any:
    def relu_boxed(x: Boxed) -> Boxed:
        assert isinstance(x, Boxed)
        return Boxed(np.maximum(x.data, 0))

    def register(registry: Any) -> None:
        registry.add_backend("box", device="boxdev", memory=BOXED, priority=50)
        registry.add_implementation("relu", "direct", "box", relu_boxed, kernel="box relu kernel")

    return make_plugin(register)


def test_memory_spaces_move_arrays_only_when_asked(global_plugin: Any, rng: np.random.Generator) -> None:
    assert global_plugin(_boxed_plugin(), name="boxed").status == "loaded"
    x = rng.standard_normal((4, 5)).astype(np.float32)
    with algoswap.trace() as trace:
        host = algoswap.ops.relu(x)
        moved = algoswap.ops.relu(x, algorithm="box:direct", transfer=True)
    assert trace[0].backend.memory.is_host and trace[1].impl.qualified == "box:direct"
    assert trace[1].kernel == "box relu kernel" and "box relu kernel" in trace.table()
    assert isinstance(moved, np.ndarray) and np.array_equal(moved, host)
    with pytest.raises(algoswap.NoImplementationError, match="works on boxed memory; the inputs are in host memory"):
        algoswap.ops.relu(x, algorithm="box:direct")


def test_a_plugin_can_declare_a_new_op(global_plugin: Any, rng: np.random.Generator) -> None:
    square = algoswap.OpSpec(
        "square", (algoswap.Input("input"),), (), shape_rule=lambda shapes, attrs: shapes["input"], family="math"
    )

    seen: list[Any] = []

    def register(registry: Any) -> None:
        registry.add_op(square)
        registry.add_backend("mathlib")
        registry.add_implementation("square", "direct", "mathlib", lambda x: x * x)
        seen.extend([registry.spec("square"), registry.spec("momentum_update").in_place])  # its own op, the core's
        with pytest.raises(algoswap.OpArgumentError, match="expected a registered op; did you mean 'square'"):
            registry.spec("squares")

    assert global_plugin(make_plugin(register), name="math").status == "loaded"
    assert seen == [square, ("param", "velocity")]
    x = rng.standard_normal(7)
    assert_close(algoswap.ops.square(x), x * x)
    assert algoswap.capabilities("square").supports("square", "direct", "mathlib")


def test_implementations_given_as_strings_are_imported_only_when_selected(
    global_plugin: Any, rng: np.random.Generator, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "algoswap_lazy_test_module.py").write_text("import numpy as np\n\ndef relu(x):\n    return np.maximum(x, 0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "algoswap_lazy_test_module", raising=False)

    def register(registry: Any) -> None:
        registry.add_backend("lazy")
        registry.add_implementation("relu", "direct", "lazy", "algoswap_lazy_test_module:relu")

    global_plugin(make_plugin(register), name="lazy")
    matrix = algoswap.capabilities("relu")
    assert matrix.supports("relu", "direct", "lazy")  # its module can be found...
    assert "algoswap_lazy_test_module" not in sys.modules  # ...without being imported
    x = rng.standard_normal(5)
    assert np.array_equal(algoswap.ops.relu(x, algorithm="lazy:direct"), np.maximum(x, 0))
    assert "algoswap_lazy_test_module" in sys.modules


@pytest.mark.parametrize(
    "register, words",
    [
        (lambda r: r.add_backend("Bad-Name"), "must be a lower-case identifier"),
        (lambda r: (r.add_backend("b"), r.add_implementation("conv3d", "direct", "b", abs)), "unknown op 'conv3d'; did you mean 'conv2d'"),
        (lambda r: r.add_implementation("relu", "direct", "numpy", abs), "backend 'numpy' was not declared by inline-dist-0 9.9"),
        (lambda r: (r.add_backend("b"), r.add_implementation("relu", "d", "b", abs), r.add_implementation("relu", "d", "b", abs)), "registered twice"),
        (lambda r: r.add_op(algoswap.registry().spec("relu")), "op 'relu' is declared by both algoswap (core) and inline-dist-0 9.9"),
    ],
)
def test_invalid_registrations_break_only_their_plugin(register: Any, words: str) -> None:
    registry = fresh_registry(make_plugin(register))
    record = registry.plugins[-1]
    assert record.status == "broken" and words in record.error, record.error
    assert select(registry, "relu", [(2,)], ["float32"]).impl.qualified == "numpy:direct"


def test_declared_unsupported_algorithms_show_their_reason() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("cpu2")
        registry.add_implementation("conv2d", "direct", "cpu2", "algoswap_numpy.conv:conv2d_direct")
        registry.declare_unsupported("conv2d", "winograd", "cpu2", "no f32 Winograd on this CPU library")

    registry = fresh_registry(make_plugin(register))
    from algoswap._capabilities import build

    matrix = build(registry, op="conv2d")
    assert not matrix.supports("conv2d", "winograd", "cpu2") and matrix.supports("conv2d", "winograd", "numpy")
    assert "* cpu2:winograd: no f32 Winograd on this CPU library" in matrix.to_text()
    cell = matrix.to_dict()["ops"]["conv2d"]["backends"]["cpu2"]["winograd"]
    assert cell == {"supported": False, "dtypes": [], "reason": "no f32 Winograd on this CPU library", "nan": None}
    with pytest.raises(algoswap.NoImplementationError, match="declared unsupported:\n  cpu2:winograd: no f32 Winograd"):
        select(registry, "conv2d", [(1, 1, 5, 5), (1, 1, 3, 3)], ["float32"] * 2, algorithm="cpu2:winograd")


def test_capability_matrix_renderings_and_queries() -> None:
    from algoswap._capabilities import build

    matrix = build(fresh_registry())  # only the numpy plugin: the figures below are its
    assert matrix.backends_for("conv2d", "winograd") == ["numpy"]
    assert matrix.algorithms_for("conv2d", "numpy") == ["direct", "fft", "smm", "winograd"]
    assert matrix.supports("maxpool2d_grad", "direct", "numpy")
    assert not matrix.supports("conv2d", "gemm", "numpy")
    document = json.loads(matrix.to_json())
    assert document["schema"] == "algoswap-capabilities" and document["schema_version"] == 1
    assert document["backends"]["numpy"]["status"] == "available"
    assert document["ops"]["conv2d"]["backends"]["numpy"]["smm"] == {"supported": True, "reason": None, "nan": "exact",
                                                                      "dtypes": ["bfloat16", "float16", "float32", "float64"]}
    assert {"name": "numpy", "distribution": "algoswap-numpy", "version": "0.1.0", "status": "loaded",
            "error": None, "backends": ["numpy"]} in document["plugins"]
    markdown = build(fresh_registry(), op="conv2d").to_markdown()
    assert "| backend | direct | fft | smm | winograd |" in markdown and "| numpy | ✓ | ✓~ | ✓ | ✓~ |" in markdown
    rst = build(fresh_registry(), op="relu").to_rst()
    assert ".. list-table::" in rst and "   * - numpy\n     - ✓" in rst
    with pytest.raises(algoswap.OpArgumentError, match="did you mean 'conv2d'"):
        algoswap.capabilities("conv2dd")


@pytest.mark.parametrize(
    "specifier, version, ok",
    [(">=1,<2", "1.0", True), (">=1,<2", "2.0", False), ("==1.*", "1.7", True), ("==1.*", "2.0", False),
     ("~=1.2", "1.5", True), ("~=1.2", "1.1", False), (">1.0", "1.0", False), ("!=1.0", "1.0", False), ("<=1", "1.0", True)],
)
def test_api_version_ranges(specifier: str, version: str, ok: bool) -> None:
    assert api_version_matches(specifier, version) is ok


def test_an_unparsable_api_range_breaks_only_that_plugin() -> None:
    registry = fresh_registry(make_plugin(lambda r: None, api="one or two"))
    assert registry.plugins[-1].status == "broken" and "cannot parse version clause" in registry.plugins[-1].error


def test_plugins_without_an_api_range_are_incompatible() -> None:
    registry = fresh_registry(types.SimpleNamespace(algoswap_register=lambda registry: None))
    assert registry.plugins[-1].status == "incompatible"
    assert "does not declare the core API versions" in registry.plugins[-1].error


def test_hooks_with_arguments_not_in_the_spec_break_only_their_plugin() -> None:
    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1", algoswap_register=lambda reg: None)
    registry = fresh_registry(plugin)
    record = registry.plugins[-1]
    assert record.status == "broken" and "invalid hooks" in record.error and "'reg'" in record.error
    assert registry.backends["numpy"].availability() is True


@pytest.mark.parametrize("request_, parsed", [
    ("default", (None, None)), ("auto", (None, None)), ("smm", (None, "smm")), ("numpy:smm", ("numpy", "smm")),
    ("numpy:default", ("numpy", None)), ("dnnl:auto", ("dnnl", "auto")),
])
def test_request_syntax(request_: str, parsed: tuple) -> None:
    from algoswap._select import parse_request

    assert parse_request("conv2d", request_) == parsed


def test_default_is_reserved_as_an_algorithm_name() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("b")
        registry.add_implementation("relu", "default", "b", abs)

    registry = fresh_registry(make_plugin(register))
    assert registry.plugins[-1].status == "broken" and "'default' is reserved" in registry.plugins[-1].error


MISSING = "algoswap_no_such_module_for_tests"


def cannot_import(what: str, ref: str, error: str) -> str:
    return f"cannot import its {what} {ref!r} (inline-dist-0 9.9): {error}"


def test_a_reference_that_cannot_be_imported_is_a_rejection_naming_it() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("lazy", priority=10)
        registry.add_implementation("relu", "direct", "lazy", f"{MISSING}:relu")
        registry.add_implementation("relu", "checked", "lazy", relu_plus(0), supports=f"{MISSING}:supports")
        registry.add_implementation("relu", "attr", "lazy", "algoswap_numpy.activation:no_such_function")

    from algoswap._capabilities import build

    registry = fresh_registry(make_plugin(register))
    missing = f"ModuleNotFoundError: No module named {MISSING!r}"
    direct = cannot_import("implementation", f"{MISSING}:relu", missing)
    attr = cannot_import("implementation", "algoswap_numpy.activation:no_such_function",
                         "AttributeError: module 'algoswap_numpy.activation' has no attribute 'no_such_function'")
    matrix = build(registry, op="relu")  # without importing anything: the module or the attribute cannot be found
    cells = matrix.to_dict()["ops"]["relu"]["backends"]["lazy"]
    assert {algorithm: (cell["supported"], cell["reason"]) for algorithm, cell in cells.items()} == {
        "direct": (False, direct), "attr": (False, attr),
        "checked": (False, cannot_import("supports() predicate", f"{MISSING}:supports", missing))}
    chosen = select(registry, "relu", [(3,)], ["float32"])
    assert chosen.impl.qualified == "numpy:direct"
    assert dict(chosen.rejected) == {
        "lazy:attr": attr,
        "lazy:checked": cannot_import("supports() predicate", f"{MISSING}:supports", missing),
        "lazy:direct": direct,
    }
    assert not build(registry, op="relu").supports("relu", "attr", "lazy")
    with pytest.raises(algoswap.NoImplementationError, match=re.escape(f"lazy:direct: {direct}")):
        select(registry, "relu", [(4,)], ["float32"], algorithm="lazy:direct")
    with pytest.raises(algoswap.PluginError) as late:
        registry.impls[("relu", "direct", "lazy")].callable
    assert str(late.value) == f"relu lazy:direct: {direct}"


def test_a_probe_that_cannot_be_imported_is_a_reason() -> None:
    registry = fresh_registry(make_plugin(lambda registry: registry.add_backend("away", probe=f"{MISSING}:probe")))
    assert registry.backends["away"].availability() == cannot_import(
        "availability probe", f"{MISSING}:probe", f"ModuleNotFoundError: No module named {MISSING!r}")
    assert registry.backends["away"].status == "unavailable"


@pytest.mark.parametrize("env, why", [
    ({"ALGOSWAP_PLUGINS": "numpy"}, "not listed in ALGOSWAP_PLUGINS: add dnnl to ALGOSWAP_PLUGINS to enable it"),
    ({"ALGOSWAP_DISABLE_PLUGINS": "dnnl"}, "listed in ALGOSWAP_DISABLE_PLUGINS: remove it from ALGOSWAP_DISABLE_PLUGINS to enable it"),
])
def test_a_request_for_a_disabled_backend_says_it_is_disabled(env: dict[str, str], why: str, tmp_path: Any) -> None:
    version = pytest.importorskip("importlib.metadata").version("algoswap-dnnl")
    registry = Registry()
    PluginLoader(registry, env={**env, "ALGOSWAP_STATE_DIR": str(tmp_path)}).discover()
    with pytest.raises(algoswap.NoImplementationError) as error:
        select(registry, "relu", [(3,)], ["float32"], algorithm="dnnl:direct")
    assert str(error.value) == (
        f"relu: 'dnnl:direct': backend 'dnnl' is not loaded: its plugin 'dnnl' (algoswap-dnnl {version}) is disabled ({why})")


def test_a_request_for_a_backend_that_is_not_installed_says_so() -> None:
    registry = fresh_registry()
    with pytest.raises(algoswap.NoImplementationError) as error:
        select(registry, "relu", [(3,)], ["float32"], algorithm="nompy:direct")
    assert str(error.value).startswith(
        "relu: 'nompy:direct': no backend 'nompy' is installed; did you mean 'numpy'? (backends loaded: numpy")
    with pytest.raises(algoswap.NoImplementationError, match="capabilities: no backend 'nompy' is installed"):
        algoswap.capabilities(backend="nompy")


@pytest.mark.parametrize("status, words", [("crashed", "crashed"), ("timed out", "timed out"), ("broken", "is broken"),
                                           ("incompatible", "is incompatible")])
def test_a_request_for_a_backend_whose_plugin_failed_says_how(status: str, words: str) -> None:
    registry = fresh_registry()
    registry._record(PluginRecord("fast", "fast-dist", "1.0", status=status, error="what happened"))
    with pytest.raises(algoswap.NoImplementationError) as error:
        select(registry, "relu", [(3,)], ["float32"], algorithm="fast:direct")
    assert str(error.value) == f"relu: 'fast:direct': backend 'fast' is not loaded: its plugin 'fast' (fast-dist 1.0) {words}: what happened"
