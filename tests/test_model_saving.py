"""Saving and copying a swap_backend Model (issue 33): a graph pickles and deep-copies without recursing
along its depth; a model unpickled where a backend it asked for is missing loads, says at its first
call what is missing and how to re-target it, and ``Model.retarget`` does. (tests/test_foreign_models.py
does the same for torchvision's and timm's models.)"""

from __future__ import annotations

import copy
import inspect
import io
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

import algoswap  # noqa: E402
from algoswap._torch.model import WAITING  # noqa: E402
from helpers import HANG_SECONDS, assert_close, backend_unavailable  # noqa: E402
from model_copies import assert_saves_and_copies, implementations  # noqa: E402

BLOCKS = 100  # about 600 nodes deep: far more than the frames pickling may take (below)
FRAMES = 150  # what pickling or copying may take above its caller, whatever the depth (it took 23 to 40)


class _Deep(nn.Module):
    """``BLOCKS`` blocks of conv → add → relu (a fusion chain) → tanh, a reshape to the batch size read from
    the value (python nodes it needs), a guard, and every tenth block a sort no registry op runs (a torch node)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(2, 2, 3, padding=1) for _ in range(BLOCKS))

    def forward(self, x: Any) -> Any:
        for i, conv in enumerate(self.convs):
            x = torch.tanh(F.relu(conv(x) + x))
            x = x.reshape(x.size(0), 2, 4, 4)
            if i % 10 == 0:
                torch._assert(x.dim() == 4, "four axes")
                x, _ = torch.sort(x, dim=3)
        return x


@pytest.fixture(scope="module")
def deep() -> algoswap.Model:
    return algoswap.swap_backend(_Deep().eval(), None, (1, 2, 4, 4), fallback="torch")


def _pure_python_pickle(value: Any) -> bytes:
    """pickle's Python implementation (what dill and other picklers build on), which recurses in Python frames."""
    file = io.BytesIO()
    pickle._Pickler(file).dump(value)  # type: ignore[attr-defined]
    return file.getvalue()


def _with_frames(frames: int, function: Callable[[], Any]) -> Any:
    """``function()`` with the recursion limit ``frames`` above the caller's depth."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + frames)
    try:
        return function()
    finally:
        sys.setrecursionlimit(old)


COPIES: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "pickle protocol 0": lambda m: pickle.loads(pickle.dumps(m, protocol=0)),
    "pickle protocol 2": lambda m: pickle.loads(pickle.dumps(m, protocol=2)),
    "pickle's Python implementation": lambda m: pickle.loads(_pure_python_pickle(m)),
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", COPIES)
def test_a_deep_graph_pickles_and_copies_in_a_few_frames(deep: algoswap.Model, how: str) -> None:
    """Every node is saved (and copied) after the nodes it holds (inputs, needs, python and torch calls'
    arguments, torch twins), so no node's references recurse: the depth taken does not grow with the graph's."""
    assert {"torch", "python"} <= {n.kind for n in deep.nodes} and deep.chains and deep.guards
    x = torch.rand(1, 2, 4, 4)
    out = deep(x)
    again = _with_frames(FRAMES, lambda: COPIES[how](deep))
    assert torch.equal(again(x), out) and implementations(again) == implementations(deep)


def test_a_deep_graph_saves_and_copies_independently(deep: algoswap.Model, tmp_path: Path) -> None:
    assert_saves_and_copies(copy.deepcopy(deep), torch.rand(1, 2, 4, 4), tmp_path)


def test_a_deep_imported_graph_pickles_and_copies_in_a_few_frames() -> None:
    module = nn.Sequential(*(layer for _ in range(BLOCKS) for layer in (nn.Linear(4, 4), nn.Tanh()))).eval()
    imported = algoswap.graph.from_torch(module, (2, 4))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)

    def run(graph: Any) -> Any:
        return algoswap.graph.Executor([graph.output]).run(feed={graph.inputs[0]: x})[0]

    out = run(imported)
    for how, copier in COPIES.items():
        again = _with_frames(FRAMES, lambda: copier(imported))
        np.testing.assert_array_equal(run(again), out, err_msg=how)


# ---------------------------------------------------------------------------- a backend missing where it loads


@pytest.fixture
def spare() -> Iterator[str]:
    """A backend of this process only ("spare", serving linear with the NumPy reference's): installed nowhere."""
    from algoswap_numpy import linear

    def register(registry: Any) -> None:
        registry.add_backend("spare", priority=-1)
        registry.add_implementation("linear", "gemm", "spare", linear.linear, kernel="numpy linear")

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="spare").status == "loaded"
    yield "spare:gemm"
    algoswap.reload_plugins()


# Loads folder/model.pkl; its first call's error on stdout; re-targeted to "default", its output in folder/out.npy.
RETARGET = """
import pickle, sys
from pathlib import Path
import numpy as np, torch
import algoswap
folder = Path(sys.argv[1])
model = pickle.loads((folder / "model.pkl").read_bytes())
x = torch.from_numpy(np.load(folder / "x.npy"))
try:
    model(x)
except algoswap.SelectorError as exc:
    print(exc)
np.save(folder / "out.npy", model.retarget("default")(x).numpy())
"""


def _load_elsewhere(model: algoswap.Model, x: Any, folder: Path, **env: str) -> str:
    """Unpickled in a fresh process (with ``env``): what its first call says; re-targeted, its output in folder/out.npy."""
    (folder / "model.pkl").write_bytes(pickle.dumps(model))
    np.save(folder / "x.npy", x.numpy())
    done = subprocess.run([sys.executable, "-c", RETARGET, str(folder)], capture_output=True, text=True,
                          timeout=HANG_SECONDS, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).eval()


def test_a_model_whose_backend_is_not_installed_loads_says_so_and_retargets(spare: str, tmp_path: Path) -> None:
    model = algoswap.swap_backend(_mlp(), {"linear": spare}, (2, 6))
    assert model.providers == {"spare": "plugin 'spare'"}
    x = torch.rand(2, 6)
    said = _load_elsewhere(model, x, tmp_path)
    assert "algoswap.Model: 2 steps ask for what no backend here serves" in said, said
    assert "'spare:gemm': no backend 'spare' is installed" in said and "layer '0' (linear), layer '2' (linear)" in said, said
    assert "backend 'spare' came from plugin 'spare'" in said and 'model.retarget("default")' in said, said
    here = copy.deepcopy(model).retarget("default")
    assert torch.equal(torch.from_numpy(np.load(tmp_path / "out.npy")), here(x))
    assert [r.request for r in model.explain()] == [spare, "default", spare]  # the original keeps its requests


def test_a_model_whose_backend_is_disabled_loads_and_names_its_distribution(tmp_path: Path) -> None:
    if backend_unavailable("dnnl"):
        pytest.skip(backend_unavailable("dnnl"))
    model = algoswap.swap_backend(_mlp(), "dnnl:default", (2, 6))
    assert model.providers["dnnl"].startswith("algoswap-dnnl ")
    said = _load_elsewhere(model, torch.rand(2, 6), tmp_path, ALGOSWAP_DISABLE_PLUGINS="dnnl")
    assert "'dnnl:default': backend 'dnnl' is not loaded: its plugin 'dnnl' (algoswap-dnnl" in said, said
    assert "layer '0' (linear), layer '1' (relu), layer '2' (linear)" in said and "model.retarget(" in said, said


def test_retarget_takes_swap_backends_selectors_and_names_what_it_refuses() -> None:
    model = algoswap.swap_backend(_mlp(), None, (2, 6))
    x = torch.rand(2, 6)
    out = model(x)
    assert model.retarget({"linear": "numpy:gemm", "1": "numpy:default"}) is model and set(model.providers) == {"numpy"}
    assert model.program is None  # planned again at the next call
    assert [(r.request, r.note) for r in model.explain()] == [("numpy:gemm", WAITING), ("numpy:default", WAITING), ("numpy:gemm", WAITING)]
    assert_close(model(x), out, reduction_length=6)
    assert implementations(model) == ["numpy:gemm", "numpy:direct", "numpy:gemm"]
    with pytest.raises(algoswap.SelectorError, match=r"Model.retarget: layer '1' \(relu\): .*'nosuch'"):
        model.retarget({"relu": "nosuch:default"})
    assert implementations(model) == ["numpy:gemm", "numpy:direct", "numpy:gemm"]  # refused: nothing changed
    model.retarget(lambda node: "default" if node.op == "linear" else "numpy:default")  # a function receives the graph node
    assert [r.request for r in model.explain()] == ["default", "numpy:default", "default"]
    model.retarget({"0": "numpy:gemm"})  # the others keep theirs
    assert [r.request for r in model.explain()] == ["numpy:gemm", "numpy:default", "default"]
    model.retarget(None, backends=["numpy"])  # for the steps asking for nothing in particular
    assert [r.request for r in model.explain()] == ["numpy:gemm", "numpy:default", "numpy:default"]
