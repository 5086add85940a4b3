"""batchnorm2d → activation chains (DenseNet's pre-activations): found on graph nodes, run as one
batchnorm2d_fused call where the batch norm's backend fuses the activation, unfused (saying why) where
it does not, and through swap_backend on a DenseNet.

Graph-level models are built from ``algoswap.graph`` nodes and run by ``algoswap.Model``, as in
test_fused_activations.py (the conv2d chains' tests), whose helpers these reuse.
"""

from __future__ import annotations

import importlib.util
import types
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from algoswap.graph._fusion import find_chains
from helpers import assert_close, network_terms, relative_error
from test_fused_activations import ACTIVATIONS, OTHERS, _model, _reference

torch = pytest.importorskip("torch")

SHAPE = (2, 4, 9, 9)
# the activation oneDNN 3.2's batch normalization fuses (algoswap_dnnl.norm.ACTIVATIONS, "none" aside)
DNNL_FUSES = ("relu",)


def _dnnl_available() -> bool:
    backend = algoswap.registry().backends.get("dnnl")  # not installed on the GPU machine
    return backend is not None and backend.availability() is True


def _dnnl_reason() -> str:
    backend = algoswap.registry().backends.get("dnnl")
    return "algoswap-dnnl is not installed" if backend is None else f"dnnl unavailable: {backend.availability()}"


def _constant(rng: np.random.Generator, shape: tuple[int, ...], name: str, positive: bool = False) -> g.Node:
    values = rng.uniform(0.5, 1.5, shape) if positive else rng.standard_normal(shape)
    return g.constant(algoswap.freeze(values.astype(np.float32)), name=name)


def _block(rng: np.random.Generator, activation: Callable[[g.Node], g.Node], conv_after: bool = True,
           **request: str) -> tuple[g.Node, g.Node]:
    """x -> batchnorm2d (running statistics, weight, bias) -> activation -> [conv2d 3x3, bias]: (the input, the output)."""
    x = g.placeholder("x", SHAPE)
    channels = SHAPE[1]
    stats = [_constant(rng, (channels,), "mean"), _constant(rng, (channels,), "var", positive=True)]
    y = g.batchnorm2d(x, *stats, _constant(rng, (channels,), "weight"), _constant(rng, (channels,), "bias"), eps=1e-5,
                      name="norm", **request)
    y = activation(y)
    if conv_after:
        y = g.conv2d(y, _constant(rng, (4, channels, 3, 3), "w"), _constant(rng, (4,), "b"), padding=1, name="conv")
    return x, y


def _norm(out: g.Node) -> g.Node:
    return next(n for n in g.topological([out]) if n.op == "batchnorm2d")


def test_the_conformance_cases_cover_every_activation() -> None:
    from algoswap.testing._cases import cases_for

    assert {attrs["activation"] for _, attrs in cases_for("batchnorm2d_fused")} == {"none", *algoswap.FUSED_ACTIVATIONS}


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_a_batchnorm_chain_ends_in_each_fused_activation(activation: str, rng: np.random.Generator) -> None:
    _, out = _block(rng, ACTIVATIONS[activation], conv_after=False)
    (chain,) = find_chains([out])
    assert chain.head is _norm(out) and chain.activation is out and chain.add is None
    assert chain.label == f"batchnorm2d+{activation}" and chain.twin.spec.name == "batchnorm2d_fused"
    assert chain.inputs == tuple(chain.head.inputs)  # no residual: batchnorm2d_fused takes none
    assert chain.fused_attrs(chain.head.attrs) == {"eps": 1e-5, "activation": activation}


@pytest.mark.parametrize("activation", list(OTHERS))
def test_other_activations_end_no_batchnorm_chain(activation: str, rng: np.random.Generator) -> None:
    _, out = _block(rng, OTHERS[activation], conv_after=False)
    assert find_chains([out]) == []


def test_an_add_after_a_batchnorm_joins_no_chain(rng: np.random.Generator) -> None:
    """batchnorm2d_fused takes no residual: bn → add → relu is no chain (the add has its own step)."""
    x, y = _block(rng, lambda y: y, conv_after=False)
    assert find_chains([g.relu(g.add(y, x))]) == []


def test_a_batchnorm_with_another_reader_or_a_pinned_activation_is_no_chain(rng: np.random.Generator) -> None:
    _, y = _block(rng, lambda y: y, conv_after=False)
    assert find_chains([g.relu(y), g.silu(y)]) == []  # two readers of the batch norm's output
    _, out = _block(rng, lambda y: g.relu(y, algorithm="numpy:direct"), conv_after=False)
    assert find_chains([out]) == []


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_fused_and_unfused_batchnorms_agree_and_explain_names_the_chain(activation: str, rng: np.random.Generator) -> None:
    """On the default backend (dnnl where available, which fuses relu only): the other activations run after
    the batch norm, the note saying why."""
    x, out = _block(rng, ACTIVATIONS[activation])
    fused, unfused = _model(x, out, find_chains([out])), _model(x, out, [])
    data = rng.standard_normal(SHAPE).astype(np.float32)
    expected = _reference(data, out)
    terms = {"reduction_length": 4 * 9 + 1, "layers": 3}
    assert_close(fused.run(data), expected, **terms, context=f"fused {activation}")
    assert_close(unfused.run(data), expected, **terms, context=f"unfused {activation}")
    rows = {row.name: row for row in fused.explain()}
    leader = "dnnl" if _dnnl_available() else "numpy"
    assert rows["norm"].implementation.split(":")[0] == leader, rows["norm"].implementation
    if leader == "numpy" or activation in DNNL_FUSES:
        assert rows["norm"].op == f"batchnorm2d+{activation}" and "fused into the batch norm" in rows["norm"].note
        assert [row.op for row in fused.explain()] == [f"batchnorm2d+{activation}", "conv2d"]
    else:
        assert rows["norm"].op == "batchnorm2d" and "not fused" in rows["norm"].note, rows["norm"].note
        assert "run after it" in rows["norm"].note, rows["norm"].note
        assert [row.op for row in fused.explain()] == ["batchnorm2d", str(out.inputs[0].op), "conv2d"]
    assert [row.op for row in unfused.explain()] == ["batchnorm2d", str(out.inputs[0].op), "conv2d"]


@pytest.fixture
def batchnorm_without_twin() -> Iterator[str]:
    """A plugin whose batchnorm2d (the NumPy reference's) has no batchnorm2d_fused twin."""

    def register(registry: Any) -> None:
        registry.add_backend("plainnorm", priority=-1)
        registry.add_implementation("batchnorm2d", "direct", "plainnorm", "algoswap_numpy.norm:batchnorm2d",
                                    kernel="numpy")

    record = algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register),
                                      name="plainnorm")
    assert record.status == "loaded", record.error
    yield "plainnorm:direct"
    algoswap.reload_plugins()


def test_a_batchnorm_without_a_fused_twin_runs_unfused_and_says_why(batchnorm_without_twin: str,
                                                                     rng: np.random.Generator) -> None:
    x, out = _block(rng, ACTIVATIONS["relu"], algorithm=batchnorm_without_twin)
    model = _model(x, out, find_chains([out]))
    data = rng.standard_normal(SHAPE).astype(np.float32)
    assert_close(model.run(data), _reference(data, out), reduction_length=37, layers=3)
    rows = {row.name: row for row in model.explain()}
    assert rows["norm"].op == "batchnorm2d" and rows["norm"].implementation == batchnorm_without_twin
    assert "has no batchnorm2d_fused" in rows["norm"].note, rows["norm"].note
    assert [row.op for row in model.explain()] == ["batchnorm2d", "relu", "conv2d"]
    assert all(model.fused_step(chain) is None for chain in model.fused)


def test_the_dnnl_batchnorm_refuses_the_activations_it_cannot_fuse_exactly() -> None:
    if not _dnnl_available():
        pytest.skip(_dnnl_reason())
    from algoswap_dnnl import norm

    registry = algoswap.registry()
    spec = registry.spec("batchnorm2d_fused")
    (impl,) = registry.implementations("batchnorm2d_fused", "dnnl")
    for activation in ("none", *algoswap.FUSED_ACTIVATIONS):
        call = spec.bind([SHAPE, (4,), (4,), (4,), (4,)], ["float32"] * 5, {"activation": activation})
        answer = impl.check(call)
        assert (answer is True) == (activation in norm.ACTIVATIONS), (activation, answer)
        assert answer is True or answer == norm.UNFUSED_REASON
        if answer is True:
            kernel = impl.kernel_name(call)
            assert kernel.startswith("bnorm") and "jit" in kernel, kernel  # a jit kernel, not the reference one


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="torchvision is not installed (make setup-test installs it)")
def test_a_densenet_runs_its_batchnorm_relus_fused_and_matches_torch() -> None:
    """torchvision's DenseNet (small: two dense blocks of two layers): each dense layer's norm1 → relu1 and
    the transition's norm → relu run as batchnorm2d+relu, norm5 → F.relu too; norm2 is folded into conv1
    (whose relu2 fuses into it); the output is PyTorch's within 1e-5."""
    from algoswap._zoo_foreign import import_library

    models = import_library("torchvision").models
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = models.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2, num_classes=10).eval()
        x = torch.randn(2, 3, 32, 32)
    fused = algoswap.swap_backend(net, sample_input_shape=tuple(x.shape))
    unfused = algoswap.swap_backend(net, sample_input_shape=tuple(x.shape), fuse=False)
    with torch.no_grad():
        expected = net(x)
    got = fused(x)
    assert_close(got, expected, **network_terms(net), context="fused")
    assert_close(unfused(x), expected, **network_terms(net), context="unfused")
    assert relative_error(got, expected) < 1e-5
    labels = [row.op for row in fused.explain() if "+" in row.op]
    assert labels.count("batchnorm2d+relu") == 2 + 2 + 1 + 1, labels  # the dense layers, the transition, norm5
    assert labels.count("conv2d+relu") == 1 + 4, labels  # the stem, and each dense layer's conv1 (norm2 folded)
    assert "batchnorm2d" not in [row.op for row in fused.explain()]
    assert "relu" not in [row.op for row in fused.explain()]
    leader = "dnnl" if _dnnl_available() else "numpy"
    bn_rows = [row for row in fused.explain() if row.op == "batchnorm2d+relu"]
    assert {row.implementation.split(":")[0] for row in bn_rows} == {leader}
    assert all("fused into the batch norm" in row.note for row in bn_rows)
    assert "batchnorm2d chains fusable" in repr(fused) and "conv2d chains" in repr(fused)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_the_dnnl_fused_relu_keeps_nan_and_infinities(layout: str, rng: np.random.Generator) -> None:
    """oneDNN's fused relu is a max with 0 (NaN became 0): NaN, +inf and -inf in the input, and inf meeting a
    zero weight (inf * 0), come out where torch has them; finite input gives torch's values."""
    if not _dnnl_available():
        pytest.skip(_dnnl_reason())
    import torch.nn.functional as F

    from algoswap.testing._nonfinite import classes

    x = rng.standard_normal((2, 8, 5, 7)).astype(np.float32)
    mean, weight, bias = (rng.standard_normal(8).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    weight[2] = 0.0
    planted = x.copy()
    planted[0, 1, 2, 3], planted[1, 4, 0, 0], planted[1, 5, 4, 6], planted[0, 2, 1, 1] = np.nan, np.inf, -np.inf, np.inf
    for given in (x, planted):
        expected = F.relu(F.batch_norm(*(torch.from_numpy(a) for a in (given, mean, var, weight, bias)), False, 0.0, 1e-5)).numpy()
        arranged = np.ascontiguousarray(given.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) if layout == "channels_last" else given
        got = algoswap.ops.call("batchnorm2d_fused", arranged, mean, var, weight, bias, eps=1e-5, activation="relu",
                                algorithm="dnnl:direct")
        assert np.array_equal(classes(got), classes(expected)), np.argwhere(classes(got) != classes(expected))
        finite = np.isfinite(expected)
        assert_close(got[finite], expected[finite], reduction_length=1, layers=1, context=f"{layout}, relu")
