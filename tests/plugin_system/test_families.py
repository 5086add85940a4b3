"""A family registered from a module given by name (algoswap-test-families): its functions are found
without importing it, the ops it lacks are reported, and references that do not resolve are
unusable, with their error, before anything is imported (never offered, then an AttributeError)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

import algoswap
from algoswap import FAMILIES
from algoswap._capabilities import build
from algoswap._select import select

from .conftest import Installed, cli, imported

OWNER = "algoswap-test-families 0.1.0"
MODULE = "algoswap_test_families.activation"
NOT_FOUND = tuple(op for op in FAMILIES["activation"] if op not in ("relu", "relu_grad"))  # in its module
LACKED = tuple(op for op in NOT_FOUND if op != "tanh")  # tanh: the implementation whose name is mistyped


def unresolvable(what: str, attribute: str) -> str:
    return (f"cannot import its {what} '{MODULE}:{attribute}' ({OWNER}): "
            f"AttributeError: module '{MODULE}' has no attribute '{attribute}'")


MISTYPED = unresolvable("implementation", "tahn")
NO_KERNEL = unresolvable("kernel() function", "no_such_kernel")


def test_a_family_module_given_by_name_is_registered_without_importing_it(discover: Any, import_log: Path) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_families")
    assert sys.modules["algoswap_test_families"].MISSING == NOT_FOUND  # what add_family returned
    assert registry.missing_ops("fam") == {"activation": LACKED} and registry.families("fam") == {"activation": MODULE}
    relu, relu_grad = registry.impls[("relu", "direct", "fam")], registry.impls[("relu_grad", "direct", "fam")]
    assert (relu.fn, relu.dtypes, relu.kernel) == (f"{MODULE}:relu", {"float32"}, "fam numpy")
    assert (relu_grad.fn, relu_grad.kernel) == (f"{MODULE}:relu_grad", "fam numpy (gradient)")  # its override
    build(registry)  # the capability matrix checks every reference, without importing either
    assert imported(import_log) == ["algoswap_test_families"]  # not the family module, not its "heavy library"
    assert relu.callable(-1.0) == 0.0  # the implementation imports its module at its first use
    assert imported(import_log) == ["algoswap_test_families", "algoswap_test_families._heavy", MODULE]


def test_references_that_do_not_resolve_are_unusable_with_their_error(discover: Any, import_log: Path) -> None:
    registry = discover(ALGOSWAP_PLUGINS="numpy,test_families")
    matrix = build(registry, backend="fam").to_dict()["ops"]
    assert matrix["tanh"]["backends"]["fam"]["mistyped"] == {"supported": False, "dtypes": [], "reason": MISTYPED, "nan": None}
    assert matrix["relu_grad"]["backends"]["fam"]["nokernel"] == {"supported": False, "dtypes": [], "reason": NO_KERNEL,
                                                                  "nan": None}
    assert matrix["relu_grad"]["backends"]["fam"]["direct"]["supported"] is True
    assert imported(import_log) == ["algoswap_test_families"]  # told without importing the module
    with pytest.raises(algoswap.NoImplementationError) as mistyped:
        select(registry, "tanh", [(3,)], ["float32"], algorithm="fam:mistyped")
    assert f"fam:mistyped: {MISTYPED}" in str(mistyped.value)  # the same words once imported
    with pytest.raises(algoswap.NoImplementationError) as no_kernel:
        select(registry, "relu_grad", [(3,), (3,)], ["float32"] * 2, algorithm="fam:nokernel")
    assert f"fam:nokernel: {NO_KERNEL}" in str(no_kernel.value)
    chosen = select(registry, "relu_grad", [(3,), (3,)], ["float32"] * 2, algorithm="fam:default")
    assert chosen.impl.qualified == "fam:direct" and list(chosen.rejected) == [("fam:nokernel", NO_KERNEL)]  # ranked first
    with pytest.raises(algoswap.PluginError, match="no_such_kernel"):
        registry.impls[("relu_grad", "nokernel", "fam")].callable


def test_the_ops_a_backend_lacks_are_logged_at_debug(discover: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="algoswap"):
        discover(ALGOSWAP_PLUGINS="numpy,test_families")
    lacks = [r.getMessage() for r in caplog.records if "has no" in r.getMessage()]
    assert lacks == [f"backend 'fam' ({OWNER}) has no activation function for: {', '.join(LACKED)}"]


def test_backends_verbose_lists_the_ops_backends_lack(installed: Installed, tmp_path: Path) -> None:
    done = cli(installed, tmp_path, "backends", "-v", ALGOSWAP_PLUGINS="numpy,test_families")
    assert done.returncode == 0, done.stderr
    assert f"  fam: activation ({MODULE} has no function for {', '.join(LACKED)})" in done.stdout.splitlines()
    assert "  numpy:" not in done.stdout  # the reference lacks nothing
    document = json.loads(cli(installed, tmp_path, "caps", "--format", "json", ALGOSWAP_PLUGINS="numpy,test_families").stdout)
    assert document["ops"]["tanh"]["backends"]["fam"]["mistyped"]["reason"] == MISTYPED
