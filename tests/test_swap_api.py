"""The swap API as users meet it: training, compiling, exporting, saving, selectors and explain."""

from __future__ import annotations

import copy
import io
import pickle
import types
from typing import Any, Iterator

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import algoswap  # noqa: E402
from helpers import assert_close, derived_seed, network_terms  # noqa: E402
from test_swap_layers import small_cnn  # noqa: E402

ALL_OPS = ("conv2d", "relu", "maxpool2d", "adaptiveavgpool2d", "flatten", "linear")


def swap_everything(model: nn.Module, conv: Any = "smm") -> nn.Module:
    algoswap.swap_conv2d(model, conv)
    for op in ALL_OPS[1:]:
        algoswap.swap_operation(op, model)
    return model


def train(model: nn.Module, steps: int, seed: int = 1) -> list[float]:
    """SGD on a fixed batch (the loss must fall: the model memorises it)."""
    generator = torch.Generator().manual_seed(derived_seed(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(8, 3, 16, 16, generator=generator, dtype=next(model.parameters()).dtype)
    target = torch.randint(0, 10, (8,), generator=generator)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_training_follows_the_same_loss_curve_and_gradients_match() -> None:
    plain, swapped = small_cnn(dtype=torch.float64), swap_everything(small_cnn(dtype=torch.float64), ["winograd", "fft"])
    x, target = torch.randn(4, 3, 16, 16, dtype=torch.float64), torch.tensor([1, 2, 3, 4])
    grads = [torch.autograd.grad(nn.functional.cross_entropy(m(x), target), list(m.parameters())) for m in (plain, swapped)]
    step = network_terms(plain, backward_of=tuple(x.shape))
    for a, b in zip(*grads):
        assert_close(a, b, **step)
    expected, got = train(plain, 30), train(swapped, 30)
    assert expected[-1] < expected[0]
    assert_close(got, expected, **network_terms(plain, backward_of=tuple(x.shape), steps=30))


def test_state_dict_parameters_pickle_deepcopy_and_moves() -> None:
    model = small_cnn()
    keys, parameters = list(model.state_dict()), list(model.parameters())
    swap_everything(model)
    assert list(model.state_dict()) == keys
    assert all(a is b for a, b in zip(model.parameters(), parameters))
    x = torch.randn(2, 3, 16, 16)
    expected = model(x)
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert type(clone[0]).__name__ == "SwappedConv2d" and clone[0].algoswap_request == "smm"
        assert torch.equal(clone(x), expected)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    fresh = small_cnn(seed=5)
    fresh.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    assert_close(fresh(x), expected, **network_terms(fresh))
    model.double()
    assert model(x.double()).dtype == torch.float64


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_traces_swapped_layers_without_graph_breaks(backend: str) -> None:
    model = swap_everything(small_cnn(), "smm")
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    expected = model(x)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)  # fullgraph: a graph break is an error
    got = compiled(x)
    assert_close(got, expected, **network_terms(model))
    got.sum().backward()
    reference = torch.autograd.grad(expected.sum(), x)[0]
    assert x.grad is not None
    assert_close(x.grad, reference, **network_terms(model, backward_of=tuple(x.shape)))


def test_torch_export_keeps_the_custom_op() -> None:
    model = swap_everything(small_cnn())
    x = torch.randn(2, 3, 16, 16)
    exported = torch.export.export(model, (x,))
    assert "algoswap.call" in str(exported.graph)
    assert_close(exported.module()(x), model(x), **network_terms(model))


@pytest.mark.parametrize("op, shapes, attrs", [
    ("conv2d", [(2, 4, 9, 8), (6, 2, 3, 3), (6,)], {"stride": [2, 1], "padding": [1, 1], "groups": 2}),
    ("conv2d", [(1, 3, 7, 7), (2, 3, 3, 3), None], {"padding_mode": "reflect", "padding": [1, 1]}),
    ("linear", [(3, 5, 7), (4, 7), (4,)], {}),
    ("maxpool2d", [(2, 3, 9, 9)], {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avgpool2d", [(2, 3, 9, 9)], {"kernel_size": 3, "stride": 2, "count_include_pad": False}),
    ("adaptiveavgpool2d", [(2, 3, 9, 7)], {"output_size": [4, 3]}),
    ("relu", [(3, 4)], {}),
    ("flatten", [(2, 3, 4)], {"start_dim": 1}),
])
def test_opcheck_passes_on_the_custom_op(op: str, shapes: list, attrs: dict) -> None:
    from algoswap._torch.bridge import _split_absent, encode_attrs

    inputs = [None if s is None else torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    tensors, absent = _split_absent(inputs)
    result = torch.library.opcheck(torch.ops.algoswap.call.default, (op, "default", encode_attrs(attrs), tensors, absent))
    assert set(result.values()) == {"SUCCESS"}, result


def test_selectors_see_real_input_shapes_in_forward_order() -> None:
    class Reordered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.late = nn.Conv2d(4, 4, 3, padding=1)
            self.early = nn.Conv2d(3, 4, 5, padding=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.late(self.early(x))

    seen = []

    def selector(module: nn.Module, shape: tuple) -> str:
        seen.append(shape)
        return "smm"

    model = Reordered()
    algoswap.swap_conv2d(model, selector, sample_input_shape=(2, 3, 12, 10))
    assert seen == [(2, 3, 12, 10), (2, 4, 12, 10)]
    algoswap.swap_conv2d(model, ["fft", "winograd"], sample_input_shape=(2, 3, 12, 10))
    assert (model.early.algoswap_request, model.late.algoswap_request) == ("fft", "winograd")
    algoswap.swap_conv2d(model, {"late": "direct"})
    assert (model.early.algoswap_request, model.late.algoswap_request) == ("default", "direct")
    algoswap.swap_conv2d(model, lambda conv: "winograd" if conv.kernel_size == (3, 3) else "smm")
    assert (model.early.algoswap_request, model.late.algoswap_request) == ("smm", "winograd")


@pytest.mark.parametrize("algos, sample, words", [
    (["smm"], None, "got 1 algorithms for 2 conv2d layers (in forward order: 0, 3)"),
    ("smn", None, "no implementation named 'smn'; did you mean 'smm'?"),
    ("winograd", (1, 3, 16, 16), "layer '3' (conv2d, input (1, 8, 8, 8)): conv2d: no implementation matching 'winograd'"),
    ({"nope": "smm"}, None, "no conv2d layer named 'nope' (conv2d layers: 0, 3)"),
    (lambda conv, shape: "smm", None, "layer '0' (conv2d): the selector takes the input shape; pass sample_input_shape"),
    (lambda conv: 3, None, "layer '0' (conv2d): the selector returned 3; expected a string"),
    ("numpy:smm:x", None, "expected 'default', 'auto', an algorithm name, or 'backend:algorithm'"),
    (42, None, "must be a string, a list, a dict, a function or prefer(...); got int"),
])
def test_selector_errors_name_the_layer(algos: Any, sample: Any, words: str) -> None:
    with pytest.raises(algoswap.SelectorError) as caught:
        algoswap.swap_conv2d(small_cnn(), algos, sample_input_shape=sample)
    assert words in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_prefer_picks_the_first_algorithm_that_serves_each_layer() -> None:
    model = small_cnn()
    algoswap.swap_conv2d(model, algoswap.prefer("winograd", otherwise="fft"), sample_input_shape=(1, 3, 16, 16))
    assert (model[0].algoswap_request, model[3].algoswap_request) == ("winograd", "fft")


def test_swap_operation_accepts_module_types_and_refuses_unknown_ops() -> None:
    model = small_cnn()
    algoswap.swap_operation(nn.MaxPool2d, model, "numpy:direct")
    assert type(model[2]).__name__ == "SwappedMaxPool2d"
    with pytest.raises(algoswap.OpArgumentError, match="a swappable module type"):
        algoswap.swap_operation(nn.LSTM, model)
    with pytest.raises(algoswap.OpArgumentError, match="an op with a torch module"):
        algoswap.swap_operation("conv3d", model)
    with pytest.raises(algoswap.SelectorError, match="return_indices"):
        algoswap.swap_operation("maxpool2d", nn.Sequential(nn.MaxPool2d(2, return_indices=True)))


@pytest.fixture
def picky_backend() -> Iterator[None]:
    def register(registry: Any) -> None:
        registry.add_backend("picky", priority=100)
        registry.add_implementation("conv2d", "tiny", "picky", "algoswap_numpy.conv:conv2d_direct",
                                    supports=lambda call: True if call.shape("input")[1] <= 3 else "only up to 3 input channels",
                                    kernel=lambda call: f"picky tiny kernel for {call.shape('weight')[2:]}")

    algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register), "picky")
    yield
    algoswap.reload_plugins()


def test_explain_names_backend_algorithm_kernel_rejections_and_backward(picky_backend: None) -> None:
    model = swap_everything(small_cnn(), "default")
    model(torch.randn(2, 3, 16, 16))
    rows = {row.name: row for row in algoswap.explain(model)}
    assert rows["0"].implementation == "picky:tiny" and rows["0"].kernel == "picky tiny kernel for (3, 3)"
    default = algoswap.select("conv2d", [(2, 8, 8, 8), (16, 8, 5, 5), (16,)], "float32", padding=2, stride=2)
    assert rows["3"].implementation == default.impl.qualified and rows["3"].input_shape == (2, 8, 8, 8)
    assert rows["3"].rejected[0] == "picky:tiny: only up to 3 input channels"
    assert "weight: conv2d_grad_weight numpy:direct (fallback: picky has none for this call)" in rows["0"].backward
    text = str(algoswap.explain(model))
    assert "picky tiny kernel for (3, 3)" in text and "rejected picky:tiny: only up to 3 input channels" in text
    assert set(rows) == {"0", "1", "2", "3", "4", "5", "6", "7"}
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    model(x).sum().backward()  # the backward of the picky layer runs on the reference backend
    assert x.grad is not None


def test_explain_before_any_call_says_so() -> None:
    model = algoswap.swap_conv2d(small_cnn(), "smm")
    rows = algoswap.explain(model)
    assert rows[0].note.startswith("not run yet")


@pytest.fixture
def recording_backend() -> Iterator[list]:
    seen: list = []

    def relu_recording(x: Any) -> Any:
        seen.append(x)
        return x.clip(0, None)

    def register(registry: Any) -> None:
        registry.add_backend("recorder")
        registry.add_implementation("relu", "direct", "recorder", relu_recording)

    algoswap.register_plugin(types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register), "recorder")
    yield seen
    algoswap.reload_plugins()


def test_contiguous_cpu_tensors_reach_the_backend_without_a_copy(recording_backend: list) -> None:
    relu = algoswap.swap_operation("relu", nn.ReLU(), "recorder:direct")
    x = torch.randn(3, 5)
    relu(x)
    assert recording_backend[-1].__array_interface__["data"][0] == x.data_ptr()
    view = torch.randn(5, 3).t()
    assert torch.equal(relu(view), view.clamp(min=0))  # a non-contiguous view is copied into shape first
    assert recording_backend[-1].flags.c_contiguous


def test_explain_folds_the_rejections_of_one_unavailable_backend() -> None:
    from algoswap._torch.explain import Explanation, Row

    reason = "backend unavailable: no device"
    row = Row("conv1", "conv2d", (1, 3, 8, 8), "default", "numpy:smm", "gemm",
              rejected=[f"gpu:{a}: {reason}" for a in ("gemm", "fft", "direct")] + ["numpy:winograd: needs a 3x3 kernel"])
    text = str(Explanation([row]))
    assert f"rejected gpu (3 algorithms): {reason}" in text and "rejected numpy:winograd: needs a 3x3 kernel" in text
    assert "gpu:fft" not in text
