"""conv2d chains ending in an activation other than relu (relu6, silu, hardswish, exact gelu): found on
graph nodes, run as one conv2d_fused call where the convolution's backend fuses the activation, and
unfused (saying why) where it does not.

Models are built from ``algoswap.graph`` nodes and run by ``algoswap.Model`` (what ``swap_backend``
makes of a torch model), so that these tests need no torch lowering of the activations; the last test
goes through ``swap_backend`` itself where the lowering exists.
"""

from __future__ import annotations

import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import graph as g
from algoswap.graph._fusion import Chain, find_chains
from helpers import assert_close
from algoswap.testing._scales import ACTIVATION_SLOPES

torch = pytest.importorskip("torch")

# conv2d_fused's activation -> how a graph computes it
ACTIVATIONS = {
    "relu": lambda x: g.relu(x),
    "relu6": lambda x: g.hardtanh(x, min_val=0.0, max_val=6.0),
    "silu": lambda x: g.silu(x),
    "hardswish": lambda x: g.hardswish(x),
    "gelu": lambda x: g.gelu(x),
}
# activations conv2d_fused does not take: they end no chain
OTHERS = {
    "hardtanh(-1, 1)": lambda x: g.hardtanh(x),
    "relu6 as hardtanh(0, 5)": lambda x: g.hardtanh(x, min_val=0.0, max_val=5.0),
    "gelu (tanh)": lambda x: g.gelu(x, approximate="tanh"),
    "elu": lambda x: g.elu(x),
    "leaky_relu": lambda x: g.leaky_relu(x),
}
SHAPE = (2, 4, 9, 9)


def test_every_fused_activation_is_covered_here_and_by_the_op_cases() -> None:
    from algoswap.testing._cases import cases_for

    assert set(ACTIVATIONS) == set(algoswap.FUSED_ACTIVATIONS) == set(ACTIVATION_SLOPES) - {"none"}
    assert {attrs["activation"] for _, attrs in cases_for("conv2d_fused")} == {"none", *algoswap.FUSED_ACTIVATIONS}


def _block(rng: np.random.Generator, activation: Any, residual: bool) -> tuple[g.Node, g.Node]:
    """x -> conv2d (3x3, bias) -> [+ x] -> activation: (the input placeholder, the output)."""
    x = g.placeholder("x", SHAPE)
    w = g.constant(algoswap.freeze(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) / 4), name="w")
    b = g.constant(algoswap.freeze(rng.standard_normal(4).astype(np.float32)), name="b")
    y = g.conv2d(x, w, b, padding=1, name="conv")
    return x, activation(g.add(y, x, name="add") if residual else y)


def _model(x: g.Node, out: g.Node, chains: list[Chain]) -> algoswap.Model:
    return algoswap.Model([x], ["x"], out, g.topological([out]), "float32", chains)


@pytest.mark.parametrize("residual", [False, True], ids=["conv", "conv+add"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_a_chain_ends_in_each_fused_activation(activation: str, residual: bool, rng: np.random.Generator) -> None:
    _, out = _block(rng, ACTIVATIONS[activation], residual)
    (chain,) = find_chains([out])
    assert chain.activation is out and chain.activation_name == activation
    assert chain.label == "+".join(["conv2d"] + ["add"] * residual + [activation])
    assert chain.fused_attrs({"padding": 1})["activation"] == activation


@pytest.mark.parametrize("activation", list(OTHERS))
def test_other_activations_end_no_chain(activation: str, rng: np.random.Generator) -> None:
    _, out = _block(rng, OTHERS[activation], residual=False)
    assert find_chains([out]) == []
    _, out = _block(rng, OTHERS[activation], residual=True)
    (chain,) = find_chains([out])
    assert chain.label == "conv2d+add" and chain.activation is None  # the add still fuses


def test_an_activation_with_its_own_request_stays_out_of_its_chain(rng: np.random.Generator) -> None:
    _, out = _block(rng, lambda y: g.silu(y, algorithm="numpy:direct"), residual=True)
    (chain,) = find_chains([out])
    assert chain.label == "conv2d+add" and chain.activation is None
    _, out = _block(rng, lambda y: g.silu(y, algorithm="numpy:direct"), residual=False)
    assert find_chains([out]) == []


def _reference(x: np.ndarray, out: g.Node) -> np.ndarray:
    """The block's output with every node on the NumPy reference, in float64."""
    def wide(node: g.Node) -> Any:
        if node.kind == "placeholder":
            return x.astype(np.float64)
        if node.kind == "constant":
            return node.host.astype(np.float64)
        return algoswap.ops.call(str(node.op), *[wide(i) for i in node.inputs], algorithm="numpy:default", **node.attrs)

    return np.asarray(wide(out))


@pytest.mark.parametrize("residual", [False, True], ids=["conv", "conv+add"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_fused_and_unfused_models_agree_and_explain_names_the_chain(activation: str, residual: bool,
                                                                     rng: np.random.Generator) -> None:
    x, out = _block(rng, ACTIVATIONS[activation], residual)
    fused, unfused = _model(x, out, find_chains([out])), _model(x, out, [])
    data = rng.standard_normal(SHAPE).astype(np.float32)
    expected = _reference(data, out)
    terms = {"reduction_length": 4 * 9 + 1 + residual, "layers": 2 + residual}
    assert_close(fused.run(data), expected, **terms, context=f"fused {activation}")
    assert_close(unfused.run(data), expected, **terms, context=f"unfused {activation}")
    label = "+".join(["conv2d"] + ["add"] * residual + [activation])
    (row,) = [row for row in fused.explain() if row.name == "conv"]
    assert row.op == label and "fused into the convolution" in row.note, (row.op, row.note)
    leader = row.implementation.split(":")[0]
    assert leader in ("dnnl", "numpy") and leader == _conv_leader(), row.implementation
    assert [row.op for row in unfused.explain()] == ["conv2d"] + ["add"] * residual + [str(out.op)]


def _conv_leader() -> str:
    """The backend "default" runs conv2d on here (dnnl where it is available)."""
    return "dnnl" if algoswap.registry().backends["dnnl"].availability() is True else "numpy"


def _fuses_relu_only(call: Any) -> bool | str:
    return True if call.attrs["activation"] in ("none", "relu") else "this conv2d_fused fuses relu only"


@pytest.fixture
def relu_only() -> Iterator[str]:
    """A plugin whose conv2d_fused (the NumPy reference's) refuses every activation but relu."""
    from algoswap_numpy import conv

    def register(registry: Any) -> None:
        registry.add_backend("reluonly", priority=-1)
        registry.add_implementation("conv2d", "smm", "reluonly", conv.conv2d_smm, kernel="numpy smm")
        registry.add_implementation("conv2d_fused", "smm", "reluonly", conv.fused(conv.conv2d_smm), kernel="numpy smm",
                                    supports=_fuses_relu_only)

    record = algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register),
                                      name="reluonly")
    assert record.status == "loaded", record.error
    yield "reluonly:smm"
    algoswap.reload_plugins()


def _on(request: str, activation: Any, rng: np.random.Generator) -> algoswap.Model:
    """The conv+add+activation block with its conv2d asked for ``request`` (add and activation: "default")."""
    x, out = _block(rng, activation, residual=True)
    out.inputs[0].inputs[0].request = request
    return _model(x, out, find_chains([out]))


def test_a_backend_that_cannot_fuse_the_activation_runs_the_chain_unfused(relu_only: str, rng: np.random.Generator) -> None:
    model = _on(relu_only, ACTIVATIONS["silu"], rng)
    data = rng.standard_normal(SHAPE).astype(np.float32)
    assert_close(model.run(data), _reference(data, model.output), reduction_length=38, layers=3)
    rows = {row.name: row for row in model.explain()}
    assert rows["conv"].op == "conv2d" and rows["conv"].implementation == relu_only
    assert "not fused" in rows["conv"].note and "fuses relu only" in rows["conv"].note, rows["conv"].note
    assert [row.op for row in model.explain()] == ["conv2d", "add", "silu"]
    fused = _on(relu_only, ACTIVATIONS["relu"], rng)
    fused.run(data)
    assert [row.op for row in fused.explain()] == ["conv2d+add+relu"]  # what it fuses, it fuses


def test_the_sycl_epilogue_refuses_activations_it_cannot_fuse() -> None:
    registry = algoswap.registry()
    available = registry.backends["sycl"].availability() if "sycl" in registry.backends else "not loaded"
    if available is not True:
        pytest.skip(f"sycl unavailable: {available}")
    spec = registry.spec("conv2d_fused")
    for impl in registry.implementations("conv2d_fused", "sycl"):
        for activation in ("none", *algoswap.FUSED_ACTIVATIONS):
            call = spec.bind([SHAPE, (4, 4, 3, 3), (4,), None], ["float32"] * 3 + [None], {"padding": 1, "activation": activation})
            answer = impl.check(call)
            assert (answer is True) == (activation in ("none", "relu")), (impl.qualified, activation, answer)


MODULES = {"relu6": lambda: torch.nn.ReLU6(), "silu": lambda: torch.nn.SiLU(), "hardswish": lambda: torch.nn.Hardswish(),
           "gelu": lambda: torch.nn.GELU()}


@pytest.mark.parametrize("activation", list(MODULES))
def test_swap_backend_fuses_convolutions_with_their_activation(activation: str) -> None:
    """A torch model: conv -> activation twice, the second with a residual add before it."""
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3, padding=1)
            self.act1, self.act2 = MODULES[activation](), MODULES[activation]()

        def forward(self, x: Any) -> Any:
            return self.act2(self.conv2(self.act1(self.conv1(x))) + x)

    with torch.random.fork_rng():
        torch.manual_seed(0)
        net, x = Block().eval(), torch.randn(*SHAPE)
    model = algoswap.swap_backend(net, sample_input_shape=SHAPE, fallback="torch")
    if "torch" in model.op_counts():
        pytest.skip(f"torch's {type(MODULES[activation]()).__name__} is not lowered to a registry op on this branch")
    fused = [row.op for row in model.explain() if "+" in row.op]
    assert fused == [f"conv2d+{activation}", f"conv2d+add+{activation}"], fused
    with torch.no_grad():
        assert_close(model(x), net(x), reduction_length=37, layers=4)
