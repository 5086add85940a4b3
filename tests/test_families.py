"""Op families (the ops each core spec module declares) and ``registry.add_family``, which registers a
backend's module of one family by finding each op's function by name; the dtype sets plugins
declare with; the reference backend as a role a backend declares."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import algoswap
from algoswap import ALL_DTYPES, FAMILIES, FLOAT_DTYPES, INT_DTYPES
from algoswap._plugins import PluginLoader
from algoswap._records import PluginRecord
from algoswap._registry import Registry
from algoswap._select import select
from algoswap._sizes import ITEMSIZE
from algoswap._specs import core_specs

ACTIVATION = FAMILIES["activation"]


def load(register: Callable[[Any], None], plugins: str = "numpy") -> tuple[Registry, PluginRecord]:
    """A registry with the installed plugins named in ``plugins`` and then the in-process one ``register``."""
    registry = Registry()
    loader = PluginLoader(registry, env={"ALGOSWAP_PLUGINS": plugins})
    loader.discover()
    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    return registry, loader.load(plugin, PluginRecord("fams", "fams-dist", "1.0"))


def module(name: str, **functions: Any) -> types.ModuleType:
    made = types.ModuleType(name)
    for attribute, function in functions.items():
        setattr(made, attribute, function)
    return made


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, dy, 0)


# ----------------------------------------------------------------------------- the families


def test_the_families_are_the_spec_modules_and_every_op_is_in_one() -> None:
    from algoswap._specs import activation, elementwise, slicing

    assert ACTIVATION == tuple(spec.name for spec in activation.SPECS)
    assert FAMILIES["elementwise"] == tuple(spec.name for spec in elementwise.SPECS) == ("add",)
    assert "slice" in FAMILIES["slicing"]
    listed = [op for ops in FAMILIES.values() for op in ops]
    assert sorted(listed) == sorted(spec.name for spec in core_specs())  # each core op once
    with pytest.raises(TypeError):
        FAMILIES["mine"] = ("relu",)  # type: ignore[index]


def test_every_backend_puts_add_in_its_elementwise_module() -> None:
    for impl in algoswap.registry().implementations("add"):
        where = impl.fn.partition(":")[0] if isinstance(impl.fn, str) else impl.fn.__module__
        assert where.endswith(".elementwise"), (impl.qualified, where)


def test_the_reference_lacks_no_op_of_any_family() -> None:
    registry = algoswap.registry()
    assert registry.reference is registry.backends["numpy"]
    assert set(registry.families("numpy")) == set(FAMILIES) and registry.missing_ops("numpy") == {}


# ----------------------------------------------------------------------------- add_family


def test_add_family_registers_the_functions_it_finds_and_returns_the_ops_it_does_not() -> None:
    returned = []

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        found = module("my_kernels.activation", relu=relu, relu_grad=relu_grad, helper=abs)
        returned.append(registry.add_family(found, "fam", dtypes=("float32",), priority=3,
                                            overrides={"relu_grad": {"algorithm": "masked", "kernel": "np.where"}}))
        registry.add_implementation("tanh", "direct", "fam", np.tanh)  # an op of the family registered otherwise
        registry.declare_unsupported("sigmoid", "direct", "fam", "no sigmoid here")

    registry, record = load(register)
    assert record.status == "loaded", record.error
    assert returned == [tuple(op for op in ACTIVATION if op not in ("relu", "relu_grad"))]
    assert registry.missing_ops("fam") == {"activation": tuple(op for op in ACTIVATION if op not in (
        "relu", "relu_grad", "tanh", "sigmoid"))}
    assert registry.families("fam") == {"activation": "my_kernels.activation"}
    direct = registry.impls[("relu", "direct", "fam")]
    assert (direct.fn, direct.dtypes, direct.priority, direct.kernel) == (relu, {"float32"}, 3, None)
    masked = registry.impls[("relu_grad", "masked", "fam")]  # its override
    assert (masked.fn, masked.priority, masked.kernel) == (relu_grad, 3, "np.where")
    assert select(registry, "relu", [(3,)], ["float32"], algorithm="fam:direct").impl is direct


def test_overrides_may_be_a_function_of_the_op() -> None:
    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family(module("k.activation", relu=relu, relu_grad=relu_grad), "fam", kernel="plain",
                            overrides=lambda op: {"kernel": f"k {op}"} if op.endswith("_grad") else {})

    registry, _ = load(register)
    assert [registry.impls[(op, "direct", "fam")].kernel for op in ("relu", "relu_grad")] == ["plain", "k relu_grad"]


@pytest.mark.parametrize("name", ["slice_", "slice"])
def test_an_op_named_like_a_builtin_may_have_a_trailing_underscore(name: str) -> None:
    def slice_(x: np.ndarray, **attrs: Any) -> np.ndarray:
        raise AssertionError("never called")

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family(module("k.slicing", **{name: slice_}), "fam")

    registry, _ = load(register)
    assert registry.impls[("slice", "direct", "fam")].fn is slice_


@pytest.mark.parametrize("call, error", [
    (lambda r: r.add_family(module("k.activations", relu=relu), "fam"),
     "add_family: module 'k.activations' is not named after an op family (its last part must be one of conv, linear"),
    (lambda r: r.add_family(module("k.activation"), "fam", overrides={"rleu": {}}),
     "add_family: overrides name ops of no family: 'rleu'"),
    (lambda r: r.add_family("algoswap_no_such_module_for_tests.activation", "fam"),
     "add_family: No module named 'algoswap_no_such_module_for_tests.activation'"),
    (lambda r: r.add_family(module("k.activation"), "elsewhere"),
     "add_family('k.activation'): backend 'elsewhere' was not declared by fams-dist 1.0"),
    (lambda r: r.add_family(module("k.activation", relu=relu), "fam", algorithm="default"),
     "'default' is reserved"),
    (lambda r: r.add_family(42, "fam"), "add_family: expected a module or its dotted name, got int"),
])
def test_a_family_that_cannot_be_registered_is_a_clear_error(call: Callable[[Any], None], error: str) -> None:
    _, record = load(lambda registry: (registry.add_backend("fam"), call(registry)))
    assert record.status == "broken" and error in record.error, record.error


def write_package(root: Path, name: str, activation: str, **more: str) -> None:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "activation.py").write_text(activation)
    for module_name, text in more.items():
        (package / f"{module_name}.py").write_text(text)


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fam_tests_")]:
        del sys.modules[name]


def test_a_module_given_by_name_is_not_imported(packages: Path) -> None:
    heavy = "import fam_tests_heavy_library  # not installed: this module cannot be imported\n"
    write_package(packages, "fam_tests_lazy", heavy + "def relu(x):\n    return x\n\nrelu_grad = relu\n")

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family("fam_tests_lazy.activation", "fam")

    registry, record = load(register, plugins="none")
    assert record.status == "loaded", record.error
    assert {i.op: i.fn for i in registry.implementations(backend="fam")} == {
        "relu": "fam_tests_lazy.activation:relu", "relu_grad": "fam_tests_lazy.activation:relu_grad"}
    assert "fam_tests_lazy.activation" not in sys.modules
    assert registry.missing_ops("fam") == {"activation": ACTIVATION[2:]}


def test_a_module_whose_code_cannot_tell_its_names_is_imported(packages: Path) -> None:
    write_package(packages, "fam_tests_star", "from ._impl import *\n", _impl="def relu(x):\n    return x\n")

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family("fam_tests_star.activation", "fam")

    registry, _ = load(register, plugins="none")
    relu_impl = registry.impls[("relu", "direct", "fam")]
    assert relu_impl.fn is sys.modules["fam_tests_star._impl"].relu
    assert [i.op for i in registry.implementations(backend="fam")] == ["relu"]


# ----------------------------------------------------------------------------- dtype sets


def test_the_dtype_sets_are_core_constants() -> None:
    assert FLOAT_DTYPES == ("float16", "bfloat16", "float32", "float64")
    assert set(INT_DTYPES) == {d for d in ITEMSIZE if d.startswith(("int", "uint"))}
    assert set(FLOAT_DTYPES) < set(ALL_DTYPES) < set(ITEMSIZE)
    assert set(ITEMSIZE) - set(ALL_DTYPES) == {"uint16", "uint32", "uint64"}


def test_all_dtypes_are_those_the_torch_front_ends_pass() -> None:
    from algoswap._torch.tensors import TORCH_DTYPES

    assert set(TORCH_DTYPES) == set(ALL_DTYPES)


def test_the_plugins_declare_the_core_dtype_sets() -> None:
    registry = algoswap.registry()
    for op in ("reshape", "concat", "slice", "zeros_like"):
        assert registry.impls[(op, "direct", "numpy")].dtypes == set(ALL_DTYPES)
    assert registry.impls[("one_hot", "direct", "numpy")].dtypes == set(INT_DTYPES)
    if "cuda" in registry.backends:  # CuPy 14 takes ml_dtypes' bfloat16
        assert registry.impls[("transpose", "direct", "cuda")].dtypes == set(ALL_DTYPES)
    if "sycl" in registry.backends:  # OpenCL C has no bfloat16
        assert registry.impls[("flatten", "direct", "sycl")].dtypes == set(ALL_DTYPES) - {"bfloat16"}


# ----------------------------------------------------------------------------- the reference role


def test_gradients_fall_back_to_the_backend_declared_the_reference_whatever_its_name() -> None:
    pytest.importorskip("torch")
    from algoswap._torch import bridge
    from algoswap_numpy import conv

    def register(registry: Any) -> None:
        registry.add_backend("truth", reference=True)
        registry.add_family(conv, "truth")  # the convolution gradients
        registry.add_backend("forward_only", priority=10)
        registry.add_implementation("conv2d", "direct", "forward_only", conv.conv2d_direct)

    registry, _ = load(register, plugins="none")
    assert registry.reference is registry.backends["truth"]
    selection = select(registry, "conv2d", [(1, 2, 5, 5), (3, 2, 3, 3), (3,)], ["float32"] * 3)
    assert selection.impl.qualified == "forward_only:direct"
    patched = pytest.MonkeyPatch()
    patched.setattr(bridge, "get_registry", lambda: registry)
    try:
        labels = [choice.label for choice in bridge.gradient_choices(selection)]
    finally:
        patched.undo()
    assert labels == [f"{wrt}: conv2d_grad_{wrt} truth:direct (fallback: forward_only has none for this call)"
                      for wrt in ("input", "weight", "bias")]


def test_the_names_read_from_code_are_every_name_its_top_level_stores() -> None:
    from algoswap._names import stored_names

    many = [f"name_{i}" for i in range(300)]  # past 256: their indices take an extended argument
    source = "\n".join(f"{name} = {i}" for i, name in enumerate(many))
    source += "\nimport os.path as p\nfrom math import tau\nif p:\n    def relu(x):\n        inner = 1\n        return x\nclass K:\n    kept = 1\n"
    assert stored_names(compile(source, "m.py", "exec")) == {*many, "p", "tau", "relu", "K"}


def test_a_module_whose_names_can_be_found_neither_way_is_an_error(packages: Path) -> None:
    write_package(packages, "fam_tests_broken", "from fam_tests_heavy_library import *\n")

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family("fam_tests_broken.activation", "fam")

    _, record = load(register, plugins="none")
    assert record.status == "broken" and record.error == (
        "RegistrationError: add_family: the names of 'fam_tests_broken.activation' cannot be read from its code, and it "
        "does not import: ModuleNotFoundError: No module named 'fam_tests_heavy_library'")


def test_a_module_with_its_own_getattr_is_asked_by_importing_it(packages: Path) -> None:
    write_package(packages, "fam_tests_dynamic", "def __getattr__(name):\n    if name == 'relu':\n        return abs\n"
                                                 "    raise AttributeError(name)\n")

    def register(registry: Any) -> None:
        registry.add_backend("fam")
        registry.add_family("fam_tests_dynamic.activation", "fam")

    registry, _ = load(register, plugins="none")
    assert [(i.op, i.fn) for i in registry.implementations(backend="fam")] == [("relu", abs)]
