"""What users of the swapping library in the seeds (swap_conv2d, swap_backend, Model.predict) find here:
unbatched inputs, the "torch" selector value, swap_with= (a function, or the library's module class), Model.predict,
and layer attributes
changed after swapping."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

F = nn.functional

import algoswap  # noqa: E402
from algoswap import graph  # noqa: E402
from algoswap._torch import SwappedModule  # noqa: E402
from algoswap._torch.custom import ALGORITHM  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402


class ConvNet(nn.Module):
    """conv -> relu -> pool: every layer torch also runs on one unbatched sample."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


class Classifier(nn.Module):
    """conv -> batch norm -> relu -> pool -> flatten -> linear (torch's BatchNorm2d wants a batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


def sample(rng: np.random.Generator, *shape: int) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def close(out: Any, ref: torch.Tensor, module: nn.Module) -> None:
    assert tuple(out.shape) == tuple(ref.shape), f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    assert_close(out, ref, **network_terms(module))


def eval_copy(module: nn.Module) -> nn.Module:
    module = module.eval()
    if isinstance(module, Classifier):  # running statistics that are not the identity
        module.bn.running_mean.uniform_(-1, 1)
        module.bn.running_var.uniform_(0.5, 2)
    return module


# ---------------------------------------------------------------------------- unbatched inputs


def test_a_model_takes_one_unbatched_sample_as_torch_layers_do(rng: np.random.Generator) -> None:
    net = eval_copy(ConvNet())
    x = sample(rng, 3, 8, 8)
    with torch.no_grad():
        expected = net(x)  # torch: (C, H, W) in, (C', H', W') out
    model = algoswap.swap_backend(net)
    assert model.sample_ranks == [4]
    close(model(x), expected, net)
    close(torch.from_numpy(model(x.numpy())), expected, net)
    close(model(x[None])[0], expected, net)  # the batched form still works


def test_an_unbatched_sample_input_shape_is_checked_up_front(rng: np.random.Generator) -> None:
    """The seed's selector reads channels at input_shape[0] of an unbatched sample for swap_conv2d; for
    swap_backend it sees the batch of one the model runs."""
    net = eval_copy(Classifier())
    x = sample(rng, 3, 8, 8)
    with torch.no_grad():
        expected = net(x[None])[0]  # torch's BatchNorm2d refuses one unbatched sample
    seen: list[tuple[int, ...]] = []
    model = algoswap.swap_backend(net, {"conv2d": lambda conv, shape: seen.append(tuple(shape)) or "smm"},
                                  sample_input_shape=(3, 8, 8))
    assert seen == [(1, 3, 8, 8)] and model.program is not None  # planned at conversion
    close(model(x), expected, net)
    five = nn.Sequential(nn.Conv2d(3, 4, 5)).eval()
    with pytest.raises(algoswap.SelectorError, match=r"(?s)layer '0' \(conv2d, input \(1, 3, 9, 9\)\).*needs a 3x3 kernel"):
        algoswap.swap_backend(five, "numpy:winograd", sample_input_shape=(3, 9, 9))

    layer = nn.Conv2d(3, 4, 3)
    shapes: list[tuple[int, ...]] = []
    swapped = algoswap.swap_conv2d(layer, lambda conv, shape: shapes.append(tuple(shape)) or "smm", sample_input_shape=(3, 9, 9))
    assert shapes == [(3, 9, 9)]
    close(swapped(x), layer(x), layer)
    with pytest.raises(algoswap.SelectorError, match=r"(?s)layer '' \(conv2d, input \(3, 9, 9\)\).*needs a 3x3 kernel"):
        algoswap.swap_conv2d(nn.Conv2d(3, 4, 5), "numpy:winograd", sample_input_shape=(3, 9, 9))
    with pytest.raises(algoswap.OpArgumentError, match=r"swap_conv2d: argument 'sample_input_shape' got \(3, 8, 8\); "
                                                        r"expected the shape of an input the module runs on \(it raised ValueError"):
        algoswap.swap_conv2d(copy.deepcopy(net), "smm", sample_input_shape=(3, 8, 8))  # torch's BatchNorm2d wants a batch


def test_unbatched_inputs_where_the_rule_cannot_hold_are_clear_errors(rng: np.random.Generator) -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 2, 1), nn.Conv2d(3, 2, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(y)

    model = algoswap.swap_backend(Two().eval())
    with pytest.raises(algoswap.OpArgumentError, match="every input batched, or every one an unbatched sample"):
        model(sample(rng, 3, 4, 4), sample(rng, 1, 3, 4, 4))

    class Total(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sum(self.conv(x).exp())

    total = algoswap.swap_backend(Total().eval(), fallback="torch")
    with pytest.raises(algoswap.OpArgumentError, match="a batch axis to remove"):
        total(sample(rng, 3, 4, 4))


# ---------------------------------------------------------------------------- "torch": leave it in PyTorch


def test_swap_conv2d_leaves_layers_given_torch_in_pytorch(rng: np.random.Generator) -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3))
    x = sample(rng, 2, 3, 8, 8)
    expected = net(x)
    algoswap.swap_conv2d(net, ["torch", "smm"], sample_input_shape=tuple(x.shape))
    assert type(net[0]) is nn.Conv2d and isinstance(net[2], SwappedModule)
    rows = {row.name: row for row in algoswap.explain(net)}
    assert rows["0"].request == "torch" and rows["0"].implementation == "torch (requested)" and rows["2"].implementation == "numpy:smm"
    close(net(x), expected, net)
    weight = net[2].weight
    algoswap.swap_conv2d(net, lambda conv: "torch")  # a function selector; a swapped layer goes back to torch
    assert type(net[2]) is nn.Conv2d and net[2].weight is weight
    algoswap.swap_conv2d(net, {"0": "default", "2": "torch"})
    assert isinstance(net[0], SwappedModule) and [r.name for r in algoswap.explain(net)] == ["0", "2"]
    close(net(x), expected, net)


def test_swap_backend_leaves_steps_given_torch_in_pytorch(rng: np.random.Generator) -> None:
    net = eval_copy(Classifier())
    x = sample(rng, 2, 3, 8, 8)
    with torch.no_grad():
        expected = net(x)
    model = algoswap.swap_backend(net, {"conv": "torch", "linear": "gemm"}, sample_input_shape=tuple(x.shape))
    rows = {row.name: row for row in model.explain()}
    assert rows["conv"].implementation == rows["bn"].implementation == "torch (requested)"  # its folded batch norm too
    assert rows["conv"].request == "torch" and rows["fc"].implementation.endswith(":gemm")
    assert "in torch (requested)" in repr(model)
    close(model(x), expected, net)
    everything = algoswap.swap_backend(net, "torch")
    assert all(node.kind == "torch" for node in everything.nodes)
    close(everything(x), expected, net)
    close(pickle.loads(pickle.dumps(model))(x), expected, net)
    algoswap.swap_conv2d(net, "torch")  # a layer left in PyTorch before stays there
    rows = {row.name: row for row in algoswap.swap_backend(net, sample_input_shape=tuple(x.shape)).explain()}
    assert rows["conv"].implementation == "torch (requested)" and rows["fc"].implementation != "torch (requested)"


def test_torch_is_refused_where_there_is_no_pytorch() -> None:
    x = graph.placeholder("x", (2, 3))
    with pytest.raises(algoswap.SelectorError, match=r"'torch' \(leave it in PyTorch\).*Executor runs no PyTorch"):
        graph.Executor([graph.relu(x)], algorithm="torch")


# ---------------------------------------------------------------------------- swap_with=


def _reference_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> np.ndarray:
    result: np.ndarray = algoswap.ops.conv2d(x, w, b, algorithm="numpy:direct", **attrs)
    return result


def test_swap_with_a_function_runs_the_swapped_layers_as_an_implementation(rng: np.random.Generator) -> None:
    calls: list[dict[str, Any]] = []

    def my_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, stride: Any, padding: Any, dilation: Any,
                groups: int, padding_mode: str) -> np.ndarray:
        calls.append({"stride": stride, "padding": padding})
        return _reference_conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups, padding_mode=padding_mode)

    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, stride=2))
    x = sample(rng, 2, 3, 8, 8).requires_grad_()
    expected = net(x)
    grad_expected = torch.autograd.grad(expected.sum(), x)[0]
    algoswap.swap_conv2d(net, {"0": "torch"}, swap_with=my_conv)
    out = net(x)
    close(out, expected, net)
    assert calls == [{"stride": (2, 2), "padding": ((0, 0), (0, 0))}]  # the canonical attributes, for layer 2 only
    grad = torch.autograd.grad(out.sum(), x)[0]  # the backward: the reference's gradient ops
    assert_close(grad, grad_expected, **network_terms(net, backward_of=tuple(x.shape)))
    row = {r.name: r for r in algoswap.explain(net)}["2"]
    backend = row.implementation.split(":")[0]
    assert row.implementation == f"{backend}:{ALGORITHM}" and backend.startswith("my_conv") and "my_conv" in row.kernel
    algoswap.swap_conv2d(net, swap_with=my_conv)  # the same function again: the same implementation
    assert {r.implementation for r in algoswap.explain(net) if r.implementation != "-"} <= {f"{backend}:{ALGORITHM}"}


def test_swap_with_results_are_checked_like_any_implementation(rng: np.random.Generator) -> None:
    def bad_conv(x: np.ndarray, w: np.ndarray, b: Any, **attrs: Any) -> np.ndarray:
        return np.zeros((1,), np.float32)

    layer = algoswap.swap_conv2d(nn.Conv2d(3, 4, 3), swap_with=bad_conv)
    with pytest.raises(algoswap.ImplementationError, match=r"bad_conv\w*:custom .*returned a float32 numpy.ndarray of shape \(1,\)"):
        layer(sample(rng, 1, 3, 5, 5))

    relu = algoswap.swap_operation("relu", nn.ReLU(), swap_with=lambda x: np.maximum(x, 0))
    x = sample(rng, 2, 7)
    close(relu(x), torch.relu(x), nn.ReLU())


# ---------------------------------------------------------------------------- swap_with= a class, the seed's form


class SpecialConv(nn.Module):
    """The swapping library's custom operator: a module class built from the original conv and the algorithm."""

    def __init__(self, orig_conv: nn.Conv2d, algorithm: str) -> None:
        super().__init__()
        self.orig_conv = orig_conv
        self.algorithm = algorithm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.orig_conv
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _two_convs() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3))


def _selector(conv: nn.Conv2d) -> str:
    return "direct" if conv.in_channels == 3 else "my_algorithm"  # the class reads the name: any string


def test_swap_with_a_module_class_replaces_the_layers_by_its_instances(rng: np.random.Generator) -> None:
    model = _two_convs()
    reference = copy.deepcopy(model)
    algoswap.swap_conv2d(model, _selector, None, swap_with=SpecialConv)  # the seed's call, verbatim
    assert [type(model[i]) for i in (0, 2)] == [SpecialConv, SpecialConv]
    assert [model[0].algorithm, model[2].algorithm] == ["direct", "my_algorithm"]  # the selector's answer per layer
    x = sample(rng, 2, 3, 10, 10)
    out, expected = model(x), reference(x)
    close(out, expected, reference)
    rows = algoswap.explain(model)
    assert [(r.name, r.request, r.implementation) for r in rows] == [
        ("0", "direct", "SpecialConv (swap_with)"), ("2", "my_algorithm", "SpecialConv (swap_with)")]
    assert "SpecialConv" in str(copy.deepcopy(model)) and len(algoswap.explain(pickle.loads(pickle.dumps(model)))) == 2


def test_a_module_class_trains_as_the_user_wrote_it(rng: np.random.Generator) -> None:
    model, reference = _two_convs(), _two_convs()
    reference.load_state_dict(model.state_dict())
    algoswap.swap_conv2d(model, None, None, swap_with=SpecialConv)
    assert len(list(model.parameters())) == len(list(reference.parameters())) == 4  # the layers' own parameters
    x = sample(rng, 2, 3, 10, 10)
    for net in (model, reference):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        net(x).square().mean().backward()  # through SpecialConv.forward: F.conv2d's gradients
        optimizer.step()
    for got, want in zip(model.parameters(), reference.parameters()):
        assert_close(got, want, **network_terms(reference, backward_of=(2, 3, 10, 10)))
    close(model(x), reference(x), reference)


def test_a_module_class_layer_stays_itself_in_swap_backend(rng: np.random.Generator) -> None:
    model = _two_convs()
    algoswap.swap_conv2d(model, {"2": "torch"}, swap_with=SpecialConv)  # layer 2 stays a plain Conv2d
    assert type(model[0]) is SpecialConv and type(model[2]) is nn.Conv2d
    algoswap.swap_conv2d(model, "smm")  # a later swap leaves the class's own layer (its orig_conv) alone
    assert type(model[0].orig_conv) is nn.Conv2d and isinstance(model[2], SwappedModule)
    converted = algoswap.swap_backend(eval_copy(model), sample_input_shape=(2, 3, 10, 10))  # no fallback needed
    row = {r.name: r for r in converted.explain()}["_0"]  # (torch.fx's name of the module "0")
    assert row.implementation == "torch (requested)" and "swap_with=SpecialConv" in row.note
    x = sample(rng, 2, 3, 10, 10)
    close(converted(x), model(x).detach(), model)


class Halved:
    """Any callable class (no nn.Module): its instances are called in the layer's place."""

    def __init__(self, orig_conv: nn.Conv2d, algorithm: str) -> None:
        self.conv = orig_conv

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) / 2


def test_swap_with_any_callable_class_keeps_the_layers_parameters(rng: np.random.Generator) -> None:
    model = _two_convs()
    reference = copy.deepcopy(model)
    algoswap.swap_conv2d(model, swap_with=Halved)
    assert len(list(model.parameters())) == 4 and isinstance(model[0].instance, Halved)
    x = sample(rng, 2, 3, 10, 10)
    close(model(x), reference[2](reference[1](reference[0](x) / 2)) / 2, reference)
    assert {r.implementation for r in algoswap.explain(model)} == {"Halved (swap_with)"}


class OneArgument(nn.Module):
    def __init__(self, orig_conv: nn.Conv2d) -> None:
        super().__init__()


class Failing(nn.Module):
    def __init__(self, orig_conv: nn.Conv2d, algorithm: str) -> None:
        raise RuntimeError(f"no kernel for {algorithm}")


def test_a_class_that_cannot_be_built_from_the_layer_is_a_clear_error() -> None:
    expected = (r"swap_conv2d: argument 'swap_with' got the class OneArgument\(orig_conv\); expected a class constructed as "
                r"OneArgument\(layer, algorithm\) for each layer, here layer '0' \(Conv2d\) and the selector's algorithm 'smm'")
    with pytest.raises(algoswap.OpArgumentError, match=expected):
        algoswap.swap_conv2d(_two_convs(), "smm", swap_with=OneArgument)
    with pytest.raises(RuntimeError, match="no kernel for default") as raised:
        algoswap.swap_conv2d(_two_convs(), swap_with=Failing)
    assert "swap_with=Failing constructing layer '0' as Failing(Conv2d, 'default')" in "".join(raised.value.__notes__)
    with pytest.raises(algoswap.OpArgumentError, match=r"'backends' got \['numpy'\]; expected None with swap_with=SpecialConv"):
        algoswap.swap_conv2d(_two_convs(), backends=["numpy"], swap_with=SpecialConv)


# ---------------------------------------------------------------------------- Model.predict


def test_model_predict_gives_the_output_type_asked_for(rng: np.random.Generator) -> None:
    net = eval_copy(ConvNet())
    x = sample(rng, 2, 3, 8, 8)
    with torch.no_grad():
        expected = net(x)
    model = algoswap.swap_backend(net)
    for given, out_type, kind in ((x, None, torch.Tensor), (x.numpy(), None, np.ndarray), (x.numpy(), torch.Tensor, torch.Tensor),
                                  (x, np.ndarray, np.ndarray), (x, torch.Tensor, torch.Tensor)):
        out = model.predict(given, out_type=out_type)
        assert type(out) is kind, (type(given), out_type)
        close(torch.as_tensor(out), expected, net)
    assert not model.predict(x.requires_grad_()).requires_grad
    with pytest.raises(algoswap.OpArgumentError, match="out_type"):
        model.predict(x, out_type=list)


# ---------------------------------------------------------------------------- attributes changed after swapping


@pytest.mark.parametrize("change", [{"stride": (2, 1)}, {"padding": (2, 0)}, {"dilation": (2, 2), "padding": "same"},
                                    {"groups": 2}, {"padding": (1, 1), "padding_mode": "reflect"}])
def test_a_swapped_layer_reads_its_attributes_at_each_call(change: dict[str, Any], rng: np.random.Generator) -> None:
    layer = nn.Conv2d(4, 6, 3)
    swapped = algoswap.swap_conv2d(copy.deepcopy(layer), "default")
    x = sample(rng, 2, 4, 9, 9)
    close(swapped(x), layer(x), layer)
    for module in (layer, swapped):
        for name, value in change.items():
            setattr(module, name, value)
    if "groups" in change:  # the weight of a grouped convolution has fewer input channels
        layer.weight = swapped.weight = nn.Parameter(layer.weight[:, :2].detach().clone())
    if change.get("padding_mode", "zeros") != "zeros":  # torch pads by this, computed in __init__
        layer._reversed_padding_repeated_twice = [p for p in reversed(layer.padding) for _ in range(2)]
    close(swapped(x), layer(x), layer)


def test_a_bad_attribute_set_after_swapping_is_a_clear_error(rng: np.random.Generator) -> None:
    conv = algoswap.swap_conv2d(nn.Conv2d(3, 4, 3), "default")
    conv.padding, conv.stride = "same", (2, 2)
    with pytest.raises(algoswap.OpArgumentError, match="conv2d: argument 'padding' got 'same'; expected stride 1"):
        conv(sample(rng, 1, 3, 8, 8))
    pool = algoswap.swap_operation("maxpool2d", nn.MaxPool2d(2), "default")
    pool.kernel_size = 3
    x = sample(rng, 1, 2, 9, 9)
    close(pool(x), F.max_pool2d(x, 3, 2), pool)
