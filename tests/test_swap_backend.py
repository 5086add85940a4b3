"""swap_backend: whole torch models run through the registry, checked against plain PyTorch."""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from algoswap._torch.builder import FunctionalCall  # noqa: E402
from algoswap._torch.convert import swap_backend  # noqa: E402
from algoswap._torch.convert import convert as convert_alias  # noqa: E402
from algoswap._torch.errors import ConversionError, UnsupportedModelError  # noqa: E402
from algoswap._torch.explain import explain  # noqa: E402
from algoswap._torch.model import Model  # noqa: E402
from algoswap._torch.selectors import SelectorError  # noqa: E402
from algoswap._torch.swap import swap_conv2d  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402


@functools.lru_cache(maxsize=None)
def zoo_model(name: str) -> nn.Module:
    return zoo.build(name)


@functools.lru_cache(maxsize=None)
def reference(name: str) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = zoo_model(name)(zoo.sample_input(name, 2, small=True))
    return out


@functools.lru_cache(maxsize=None)
def converted(name: str) -> Model:
    """The default conversion of a zoo model with a sample input shape (selection done up front)."""
    return swap_backend(zoo_model(name), sample_input_shape=zoo.input_shape(name, 2, small=True))


def close(out: Any, ref: torch.Tensor, module: nn.Module, functional: tuple[int, ...] = ()) -> None:
    """``out`` of a conversion of ``module`` against torch's ``ref`` (the policy in tests/helpers.py);
    ``functional``: the reduction lengths of its functional calls (F.linear), which modules do not show."""
    assert_close(out, ref, **network_terms(module, functional=functional))


# ---------------------------------------------------------------------------- the zoo


@pytest.mark.parametrize("name", zoo.MODELS)
def test_zoo_model_matches_pytorch(name: str) -> None:
    model = converted(name)
    out = model(zoo.sample_input(name, 2, small=True))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == reference(name).shape
    close(out, reference(name), zoo_model(name))
    assert not any(node.kind == "torch" for node in model.nodes)


@pytest.mark.parametrize("name", ["resnet18", "squeezenet"])
def test_float64_without_sample_shape(name: str) -> None:
    model = swap_backend(zoo_model(name), dtype=torch.float64)
    assert model.dtype == "float64" and all(a.dtype == np.float64 for a in model.constants.values() if a.dtype.kind == "f")
    x = zoo.sample_input(name, 2, small=True, dtype=torch.float64)
    with torch.no_grad():
        ref = copy.deepcopy(zoo_model(name)).double()(x)
    out = model(x.float())  # inputs are cast to the model's dtype
    assert out.dtype == torch.float64
    close(out, ref, zoo_model(name))


def _where_supported(algorithm: str) -> Any:
    """A conv2d selector taking ``algorithm`` where the registry says it serves the layer, else "default"."""

    def choose(conv: nn.Conv2d, input_shape: tuple[int, ...]) -> str:
        try:
            algoswap.select("conv2d", [input_shape, tuple(conv.weight.shape), (conv.out_channels,)], "float32", algorithm,
                            stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
        except algoswap.NoImplementationError:
            return "default"
        return algorithm

    return choose


def _available_conv2d_algorithms() -> list[str]:
    registry = algoswap.registry()
    return sorted({i.algorithm for i in registry.implementations("conv2d") if registry.backends[i.backend].availability() is True})


@pytest.mark.parametrize("algorithm", _available_conv2d_algorithms())
def test_resnet18_with_every_conv2d_algorithm(algorithm: str) -> None:
    model = swap_backend(zoo_model("resnet18"), {"conv2d": _where_supported(algorithm)}, zoo.input_shape("resnet18", 2, small=True))
    rows = [row for row in model.explain() if row.op.startswith("conv2d")]  # fused chains too: "conv2d+relu"
    used = [row for row in rows if row.implementation.endswith(f":{algorithm}")]
    assert len(rows) == 20 and used
    if algorithm == "winograd":  # 3x3, stride 1 only: the 7x7 stem and the strided/1x1 convolutions stay default
        assert 0 < len(used) < len(rows) and all(row.request in ("winograd", "default") for row in rows)
    else:
        assert len(used) == len(rows)
    close(model(zoo.sample_input("resnet18", 2, small=True)), reference("resnet18"), zoo_model("resnet18"))


# ---------------------------------------------------------------------------- structure of the plan


def test_batch_norms_are_folded_and_residuals_and_concats_are_ops() -> None:
    resnet, squeezenet = converted("resnet18"), converted("squeezenet")
    batch_norms = [name for name, m in zoo_model("resnet18").named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert sorted(resnet.folded_batchnorms) == sorted(batch_norms) and len(batch_norms) == 20
    counts = resnet.op_counts()
    assert "batchnorm2d" not in counts and counts["add"] == 8 and counts["conv2d"] == 20
    assert squeezenet.op_counts()["concat"] == 8
    stem = next(row for row in resnet.explain() if row.name == "conv1")
    conv_implementations = {impl.qualified for impl in algoswap.registry().implementations("conv2d")}
    assert stem.note.startswith("batch norm bn1 folded") and stem.implementation in conv_implementations
    assert "20 batch norms folded" in repr(resnet) and f"backends: {', '.join(resnet.backends())}" in repr(resnet)


class _Functional(nn.Module):
    """Functional calls of every supported kind, a batch norm after a non-conv, weights used directly."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn_in = nn.BatchNorm2d(3)
        self.bn_shared = nn.BatchNorm2d(6)
        self.weight = nn.Parameter(torch.randn(5, 24) * 0.2)
        self.bias = nn.Parameter(torch.randn(5))
        self.drop = nn.Dropout(0.3)
        for bn in (self.bn_in, self.bn_shared):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> Any:
        x = self.bn_in(x)  # no conv before it: runs as the batchnorm2d op
        y = self.conv(x)
        y = self.bn_shared(y) + y  # the conv feeds more than the batch norm: no folding
        y = F.relu(y)
        y = torch.add(y, torch.relu(y))
        y += 0.5
        a = F.max_pool2d(y, 2)
        b = F.avg_pool2d(y, kernel_size=2, stride=2)
        z = torch.cat([a, b], dim=1)
        z = F.adaptive_avg_pool2d(F.dropout(z, 0.2, training=self.training), (2, 1))
        z = z.view(z.size(0), -1)
        flat = torch.flatten(z.reshape(z.shape[0], 4, -1), 1)
        out = F.linear(self.drop(flat), self.weight, self.bias)
        return torch.relu(out).contiguous(), out.relu()


def _functional() -> nn.Module:
    return _Functional().eval()


def test_functional_calls_match_pytorch_at_any_batch_size() -> None:
    module = _functional()
    model = swap_backend(module)
    counts = model.op_counts()
    assert counts["batchnorm2d"] == 2 and counts["concat"] == 1 and counts["add"] == 2 and counts["add_scalar"] == 1
    assert "torch" not in counts
    assert [n for n in model.nodes if n.kind == "op" and n.needs]  # view(x.size(0), -1)
    for batch in (2, 5):
        x = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            ref = module(x)
        out = model(x)
        for o, r in zip(out, ref):
            close(o, r, module, functional=(24 + 1,))


def test_numpy_in_numpy_out_and_pickle_round_trip() -> None:
    model = converted("resnet18")
    x = zoo.sample_input("resnet18", 2, small=True)
    out = model(x.numpy())
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, model(x).numpy())
    assert model(x.numpy().astype(np.float64)).dtype == np.float32  # cast to the model's dtype
    again = pickle.loads(pickle.dumps(model))
    assert isinstance(again, Model) and "backends: none selected yet" in repr(again)
    np.testing.assert_array_equal(again(x.numpy()), out)


def test_intermediate_values_are_freed() -> None:
    model = converted("resnet50")
    live = max_live = 0
    alive: set[int] = set()
    for step in model.plan((1, 3, 224, 224)).steps:
        alive.add(step.output)
        max_live = max(max_live, len(alive))
        alive -= set(step.free)
        live = len(alive)
    assert live == 1 and max_live <= 4  # the output only; a bottleneck holds at most its input and branches


# ---------------------------------------------------------------------------- unsupported nodes and fallback


class _Unusual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cumsum(self.conv(x), dim=1)
        pooled, _ = F.max_pool2d(y, 2, return_indices=True)  # traced as F.max_pool2d_with_indices
        values, _ = torch.sort(self.shuffle(pooled).tanh(), dim=1)
        values = F.adaptive_max_pool1d(values.flatten(2), 2)  # F.adaptive_max_pool1d does not pickle: stored by its name
        return F.relu(values)[..., [1, 0], None]  # a gather beside another index


UNUSUAL = ["cumsum", "max_pool2d_with_indices", "shuffle", "sort", "adaptive_max_pool1d", "getitem_4"]  # the nodes no registry op runs


def test_unsupported_nodes_are_listed_together() -> None:
    with pytest.raises(UnsupportedModelError) as caught:
        swap_backend(_Unusual().eval())
    error_ = caught.value
    assert isinstance(error_, ValueError) and isinstance(error_, algoswap.AlgoswapError)
    assert [n.name for n in error_.nodes] == UNUSUAL
    message = str(error_)
    for words in ("6 nodes", "torch.cumsum", "torch.nn.functional.adaptive_max_pool1d", "PixelShuffle module 'shuffle'", "torch.sort",
                  "beside other indices (a gather", "fallback='torch'"):
        assert words in message


class _BadAttributes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(F.max_pool2d(x, 2, padding=-1), 2, divisor_override=0)


def test_attributes_the_op_refuses_are_unsupported_nodes() -> None:
    with pytest.raises(UnsupportedModelError) as caught:
        swap_backend(_BadAttributes().eval())
    assert [n.name for n in caught.value.nodes] == ["max_pool2d", "avg_pool2d"]
    assert "maxpool2d: argument 'padding' got -1" in str(caught.value) and "divisor_override" in str(caught.value)


@pytest.mark.parametrize("sample", [None, (2, 3, 8, 8)])
def test_fallback_runs_unsupported_nodes_in_torch(sample: Any) -> None:
    module = _Unusual().eval()
    model = swap_backend(module, sample_input_shape=sample, fallback="torch", tracer="torch.fx")  # torch.export leaves fewer
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        ref = module(x)
    close(model(x), ref, module)
    rows = {row.name: row for row in explain(model)}
    assert [name for name, row in rows.items() if row.implementation == "torch (fallback)"] == UNUSUAL
    conv_implementations = {impl.qualified for impl in algoswap.registry().implementations("conv2d")}
    assert rows["conv"].implementation in conv_implementations and "no registry op runs torch.sort" in rows["sort"].note
    assert "6 nodes in torch (fallback)" in repr(model)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(model))(x.numpy()), model(x.numpy()))


# ---------------------------------------------------------------------------- selectors


def test_dict_list_and_function_selectors() -> None:
    resnet = zoo_model("resnet18")
    shape = zoo.input_shape("resnet18", 1, small=True)
    model = swap_backend(resnet, {"conv2d": {"conv1": "numpy:direct", "layer1.0.conv2": "numpy:fft"}, "linear": "numpy:gemm"}, shape)
    rows = {row.name: row for row in model.explain()}
    assert rows["conv1"].implementation == "numpy:direct" and rows["layer1_0_conv2"].implementation == "numpy:fft"
    assert rows["layer1_0_conv1"].request == "default" and rows["fc"].request == "numpy:gemm"
    requests = ["direct"] * 10 + ["smm"] * 10
    listed = swap_backend(resnet, {"conv2d": requests})
    assert [s.request for s in listed.op_nodes() if s.op == "conv2d"] == requests
    with pytest.raises(SelectorError, match="got 3 algorithms for 20 conv2d layers"):
        swap_backend(resnet, {"conv2d": ["direct", "smm", "fft"]})

    seen: list[Any] = []
    convnet = zoo_model("convnet")  # F.relu calls: no module
    model = swap_backend(convnet, {"relu": lambda call: seen.append(call) or "numpy:direct", "maxpool2d": lambda m: "default"})
    assert len(seen) == 4 and all(isinstance(c, FunctionalCall) and c.op == "relu" and c.target is F.relu for c in seen)
    x = zoo.sample_input("convnet", 2, small=True)
    with torch.no_grad():
        close(model(x), convnet(x), convnet)
    shapes: list[Any] = []
    swap_backend(convnet, {"linear": lambda m, s: shapes.append(s) or "default"}, zoo.input_shape("convnet", 3))
    assert shapes == [(3, 2048), (3, 256)]
    everywhere = swap_backend(convnet, "numpy:default", zoo.input_shape("convnet", 1))  # one request for every op
    assert all(row.request == "numpy:default" and row.implementation.startswith("numpy:") for row in everywhere.explain())
    swapped = swap_conv2d(zoo.build("convnet"), "direct")  # layers swapped before keep their request
    assert {s.request for s in swap_backend(swapped).op_nodes() if s.op == "conv2d"} == {"direct"}


def test_selector_errors_name_the_node() -> None:
    resnet = zoo_model("resnet18")
    shape = zoo.input_shape("resnet18", 1, small=True)
    with pytest.raises(SelectorError, match=r"(?s)layer 'conv1' \(conv2d, input \(1, 3, 64, 64\)\).*winograd F\(2x2,3x3\) needs a 3x3 kernel"):
        swap_backend(resnet, {"conv2d": "winograd"}, shape)
    with pytest.raises(SelectorError, match=r"layer 'conv1'.*no implementation named 'winogard'; did you mean 'winograd'"):
        swap_backend(resnet, {"conv2d": "winogard"})
    with pytest.raises(SelectorError, match="no op, layer or node named 'conv'; did you mean 'conv1' or 'conv2d'"):
        swap_backend(resnet, {"conv": "smm"})
    with pytest.raises(SelectorError, match="no conv2d layer named 'conv9'; did you mean 'conv1'"):
        swap_backend(resnet, {"conv2d": {"conv9": "smm"}})
    with pytest.raises(SelectorError, match="pass sample_input_shape"):
        swap_backend(resnet, {"conv2d": lambda m, s: "smm"})
    with pytest.raises(SelectorError, match="returned 3"):
        swap_backend(resnet, {"conv2d": lambda m: 3})


# ---------------------------------------------------------------------------- policies


def test_training_mode_is_refused_with_advice() -> None:
    module = zoo.build("convnet").train()
    with pytest.raises(ConversionError, match=r"training mode.*module\.eval\(\)") as caught:
        swap_backend(module)
    assert isinstance(caught.value, ValueError)
    assert module.training  # the module is left as it is


def test_lazy_selection_dtype_argument_and_alias() -> None:
    model = convert_alias(zoo_model("convnet"), dtype="float64")
    assert model.dtype == "float64" and "none selected yet" in repr(model)
    assert all(row.implementation == "-" and "not run yet" in row.note for row in model.explain())
    model(zoo.sample_input("convnet", 2))
    assert all(row.implementation.startswith("numpy:") for row in explain(model))
    with pytest.raises(ConversionError, match="dtype must be"):
        swap_backend(zoo_model("convnet"), dtype=torch.int32)
    with pytest.raises(ConversionError, match="fallback must be"):
        swap_backend(zoo_model("convnet"), fallback="numpy")


def test_the_model_owns_a_copy_of_the_weights() -> None:
    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    model = swap_backend(module, sample_input_shape=tuple(x.shape))
    before = model(x)
    with torch.no_grad():
        module[0].weight.mul_(2)  # training the torch model afterwards
    assert torch.equal(model(x), before)
