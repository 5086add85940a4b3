"""Channels-last activations and conv2d fusion in swap_backend models.

Implementations registered with layout "any" or "channels_last" get 4-D activations in NHWC memory
order from a Model: each is checked here on such inputs against the reference. Fusion: conv2d
chains become one conv2d_fused call where the conv2d's implementation has a twin, and stay unfused
(saying why) where not.
"""

from __future__ import annotations

import types
from typing import Any, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import zoo
from helpers import assert_close, network_terms
from helpers import assert_op_close, hardware_refusal
from algoswap.testing._cases import bind, cases_for, draw, reference_name

torch = pytest.importorskip("torch")

from algoswap._layout import arrange, is_channels_last  # noqa: E402


def _layout_impls() -> list[Any]:
    registry = algoswap.registry()
    return [pytest.param(impl, id=f"{impl.op}-{impl.qualified}") for impl in registry.implementations()
            if impl.layout != "contiguous" and "float32" in impl.dtypes
            and registry.backends[impl.backend].availability() is True]


@pytest.mark.parametrize("impl", _layout_impls())
def test_channels_last_inputs_match_the_reference(impl: algoswap.ImplRecord, rng: np.random.Generator) -> None:
    weights = tuple(i for i, given in enumerate(algoswap.registry().spec(impl.op).inputs) if given.name in ("weight", "bias"))
    ran = 0
    for shapes, attrs in cases_for(impl.op):
        call = bind(impl.op, shapes, "float32", attrs)
        if impl.check(call) is not True or not any(s is not None and len(s) == 4 for s in call.shapes):
            continue
        inputs = [draw(rng, s, "float32") for s in shapes]
        laid_out = arrange(list(inputs), "channels_last", weights)
        out = impl.callable(*laid_out, **call.attrs)
        wide = [None if a is None else a.astype(np.float64) for a in inputs]
        ref = algoswap.ops.call(impl.op, *wide, algorithm=reference_name(impl.op), **attrs)
        assert_op_close(impl.op, out, ref, inputs, attrs, context=f"{impl.qualified} on channels-last {shapes} {attrs}")
        if _given_channels_last(impl, laid_out, weights) and out.ndim == 4 and out.shape[1] > 1 and out.shape[2] * out.shape[3] > 1:
            assert is_channels_last(out), f"{impl.qualified} should keep channels-last activations channels-last ({shapes} {attrs})"
        ran += 1
    assert ran, f"{impl.qualified} ran none of the cases of {impl.op}"


def _given_channels_last(impl: algoswap.ImplRecord, inputs: list[Any], weights: tuple[int, ...]) -> bool:
    """Whether the implementation got only channels-last activations: it must then give one back. Those of
    layout "any" get arrays as they are, and a 4-D operand broadcast along H and W is not channels-last. A
    transpose moves the axes themselves: its output's memory order is the permuted input's, not a layout."""
    if impl.op == "transpose":
        return False
    activations = [a for i, a in enumerate(inputs) if a is not None and i not in weights]
    return impl.layout == "channels_last" or bool(activations) and all(is_channels_last(a) for a in activations)


@pytest.mark.parametrize("op", ["batchnorm2d", "concat"])
def test_dnnl_batch_norm_and_concat_take_channels_last_activations_as_they_are(op: str) -> None:
    """Between channels-last convolutions (DenseNet: concat, batch norm, relu, conv) they ran on NCHW copies:
    the runner gave them C-contiguous arrays. The test above checks that they keep the order they are given."""
    (impl,) = [i for i in algoswap.registry().implementations(op) if i.backend == "dnnl"]
    assert impl.layout == "any"


class _DenseBlock(torch.nn.Module):
    """DenseNet's pattern: every layer reads the concatenation of all earlier outputs through batch norm and relu."""

    def __init__(self, channels: int = 8, growth: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels, 3, padding=1)
        widths = [channels + growth * i for i in range(layers)]
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm2d(w) for w in widths)
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(w, growth, 3, padding=1) for w in widths)

    def forward(self, x: Any) -> Any:
        features = [self.stem(x)]
        for norm, conv in zip(self.norms, self.convs):
            features.append(conv(torch.relu(norm(torch.cat(features, 1)))))
        return torch.cat(features, 1)


def test_a_dense_block_runs_concat_and_batch_norm_on_dnnl_and_matches_torch(rng: np.random.Generator) -> None:
    torch.manual_seed(int(rng.integers(2**31)))  # the weights, from the test's seed
    model = _DenseBlock().eval()
    with torch.no_grad():
        for norm in model.norms:
            norm.running_mean.uniform_(-0.2, 0.2)
            norm.running_var.uniform_(0.7, 1.5)
    x = torch.from_numpy(rng.standard_normal((2, 3, 9, 7)).astype(np.float32))
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape))
    with torch.no_grad():
        expected = model(x)
    assert_close(converted(x), expected, **network_terms(model), context="dense block")
    ops = ("concat", "batchnorm2d", "batchnorm2d+relu")
    assert {(step.op, step.backend) for step in converted.program.steps if step.op in ops} == {
        ("concat", "dnnl"), ("batchnorm2d+relu", "dnnl")}  # each batch norm with its relu fused


def test_arrange_leaves_weights_and_already_ordered_arrays_alone() -> None:
    x = np.ones((2, 3, 4, 5), np.float32)
    w = np.ones((6, 3, 3, 3), np.float32)
    x_cl, w_kept = arrange([x, w], "channels_last", (1,))
    assert is_channels_last(x_cl) and w_kept is w
    assert arrange([x_cl, w], "channels_last", (1,))[0] is x_cl  # no second copy
    back = arrange([x_cl], "contiguous", ())[0]
    assert back.flags.c_contiguous and np.array_equal(back, x)
    assert arrange([x_cl], "any", ())[0] is x_cl


@pytest.mark.parametrize("shape", [(1, 72, 1, 1), (2, 1, 5, 3)])
def test_arrange_leaves_arrays_in_both_memory_orders_alone(shape: tuple[int, ...]) -> None:
    """A squeeze-and-excitation gate (N, C, 1, 1), or one channel, is NCHW and NHWC memory at once: no copy."""
    x = np.ones(shape, np.float32)
    assert arrange([x], "channels_last", ())[0] is x


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 16])
def test_arrange_gives_the_same_values_in_nhwc_memory_for_any_channel_count(channels: int, rng: np.random.Generator) -> None:
    """Few channels (a model's RGB input) are copied channel by channel, more by one transposing copy."""
    x = rng.standard_normal((2, channels, 5, 3)).astype(np.float32)
    for given in (x, x[:, :, ::-1]):  # C-contiguous, and strided
        (nhwc,) = arrange([given], "channels_last", ())
        assert np.array_equal(nhwc, given) and nhwc.transpose(0, 2, 3, 1).flags.c_contiguous


def _resnet() -> tuple[Any, Any]:
    return zoo.build("resnet18").eval(), zoo.sample_input("resnet18", 2, small=True)


def test_resnet18_chains_are_fused_on_dnnl_and_match_torch() -> None:
    model, x = _resnet()
    fused = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape))
    unfused = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape), fuse=False)
    with torch.no_grad():
        expected = model(x)
    assert_close(fused(x), expected, **network_terms(model), context="fused")
    assert_close(unfused(x), expected, **network_terms(model), context="unfused")
    labels = [step.label for step in fused.fused]
    assert labels.count("conv2d+add+relu") == 8 and labels.count("conv2d+relu") == 9  # every block, and the stem
    rows = [row for row in fused.explain() if "+" in row.op]
    assert len(rows) == 17 and {row.implementation.split(":")[0] for row in rows} == {"dnnl"}
    assert all("fused into the convolution" in row.note for row in rows)
    assert fused.op_counts() == unfused.op_counts()  # members are counted as the ops they are
    assert not unfused.fused and "conv2d chains fusable" in repr(fused)


def test_a_pinned_relu_stays_out_of_its_chain() -> None:
    model, x = _resnet()
    converted = algoswap.swap_backend(model, {"relu": "numpy:direct"}, tuple(x.shape))
    with torch.no_grad():
        assert_close(converted(x), model(x), **network_terms(model))
    rows = {row.name: row for row in converted.explain()}
    assert rows["conv1"].op == "conv2d" and rows["relu"].implementation == "numpy:direct"
    assert rows["layer1_0_conv2"].op == "conv2d+add"  # its relu runs as asked; the add still fuses


def test_a_model_asked_for_one_backend_fuses_on_it() -> None:
    """One request for every op ("numpy:default"): the adds and relus asked for the conv's backend
    join its chains; one asked for another backend's default does not."""
    model, x = _resnet()
    whole = algoswap.swap_backend(model, "numpy:default", tuple(x.shape))
    split = algoswap.swap_backend(model, {"conv2d": "numpy:default", "relu": "dnnl:default"}, tuple(x.shape))
    with torch.no_grad():
        expected = model(x)
    assert_close(whole(x), expected, **network_terms(model), context="numpy:default")
    assert_close(split(x), expected, **network_terms(model), context="split")
    chains = [row for row in whole.explain() if "+" in row.op]
    assert len(chains) == 17 and {row.implementation for row in chains} == {"numpy:smm"}
    assert {row.op for row in split.explain() if "+" in row.op} == {"conv2d+add"}


@pytest.fixture
def conv_without_twin() -> Iterator[str]:
    """A plugin whose conv2d has no conv2d_fused twin (the numpy reference underneath)."""

    def register(registry: Any) -> None:
        registry.add_backend("plainconv", priority=-1)
        registry.add_implementation("conv2d", "smm", "plainconv", "algoswap_numpy.conv:conv2d_smm", kernel="numpy smm")

    record = algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register),
                                      name="plainconv")
    assert record.status == "loaded", record.error
    yield "plainconv:smm"
    algoswap.reload_plugins()


def test_a_conv_without_a_fused_twin_runs_unfused_and_says_why(conv_without_twin: str) -> None:
    model, x = _resnet()
    converted = algoswap.swap_backend(model, {"conv2d": conv_without_twin}, tuple(x.shape))
    with torch.no_grad():
        assert_close(converted(x), model(x), **network_terms(model))
    stem = next(row for row in converted.explain() if row.name == "conv1")
    assert stem.implementation == conv_without_twin and "has no conv2d_fused" in stem.note
    assert all(converted.fused_step(chain) is None for chain in converted.fused)


def test_fused_models_pickle_and_run_again() -> None:
    import pickle

    model, x = _resnet()
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape))
    expected = converted(x)
    again = pickle.loads(pickle.dumps(converted))
    assert_close(again(x), expected, **network_terms(model))
    assert len(again.fused) == 17


SEEN: list[tuple[bool, bool]] = []  # (the input is channels-last, the weight is C-contiguous), per call


def _recording_conv(x: np.ndarray, weight: np.ndarray, bias: Any, **attrs: Any) -> np.ndarray:
    from algoswap_numpy.conv import conv2d_smm

    SEEN.append((is_channels_last(x), weight.flags.c_contiguous))
    return conv2d_smm(x, weight, bias, **attrs)


@pytest.fixture
def channels_last_conv() -> Iterator[str]:
    """A conv2d declared layout="channels_last" that records the memory order it was given."""

    def register(registry: Any) -> None:
        registry.add_backend("nhwc", priority=-1)
        registry.add_implementation("conv2d", "direct", "nhwc", _recording_conv, layout="channels_last")

    record = algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register),
                                      name="nhwc")
    assert record.status == "loaded", record.error
    SEEN.clear()
    yield "nhwc:direct"
    algoswap.reload_plugins()


def test_every_front_end_gives_a_channels_last_implementation_nhwc_activations(channels_last_conv: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 5)).astype(np.float32)  # NCHW, C-contiguous
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    algoswap.ops.conv2d(x, w, None, algorithm=channels_last_conv, padding=1)  # the functional API
    layer = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1))
    algoswap.swap_conv2d(layer, channels_last_conv)(torch.from_numpy(x))  # a swapped layer (the torch bridge)
    algoswap.swap_backend(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1)).eval(), {"conv2d": channels_last_conv},
                          x.shape)(torch.from_numpy(x))  # a whole model (the graph executor)
    assert SEEN == [(True, True)] * 3


def test_bfloat16_residuals_of_convolutions_with_few_channels_per_group(rng: np.random.Generator) -> None:
    """oneDNN 3.2 adds an NHWC bfloat16 residual wrongly when a group has few input channels: the
    dnnl wrapper runs such calls in NCHW order instead."""
    pytest.importorskip("algoswap_dnnl")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if refusal := hardware_refusal("dnnl", "bfloat16"):
        pytest.skip(refusal)
    for channels, groups in ((3, 1), (32, 4)):
        x = rng.standard_normal((2, channels, 10, 10))
        w = rng.standard_normal((16, channels // groups, 3, 3))
        r = rng.standard_normal((2, 16, 10, 10))
        attrs = {"padding": 1, "groups": groups, "activation": "none"}
        low = [arrange([a.astype(ml_dtypes.bfloat16)], "channels_last", ())[0] for a in (x, w, r)]
        out = algoswap.ops.conv2d_fused(low[0], np.ascontiguousarray(low[1]), None, low[2], algorithm="dnnl:direct",
                                        **attrs)
        wide = [a.astype(np.float64) for a in low]
        ref = algoswap.ops.conv2d_fused(wide[0], wide[1], None, wide[2], algorithm=reference_name("conv2d_fused"), **attrs)
        assert_op_close("conv2d_fused", out, ref, [wide[0], wide[1], None, wide[2]], attrs, context=f"dnnl:direct bfloat16, {channels} channels, groups {groups}")
