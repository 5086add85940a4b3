"""The built-in model zoo (algoswap.zoo): determinism, shapes, traceability and faithfulness to torchvision."""

from __future__ import annotations

import functools
import importlib.util
import operator
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
fx = pytest.importorskip("torch.fx")
nn = torch.nn

from algoswap import zoo  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402

# torchvision's parameter counts at num_classes=1000 (squeezenet is squeezenet1_1)
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "squeezenet": 1_235_496,
}
WITH_BATCH_NORM = ("resnet18", "resnet50", "mobilenet")


@functools.lru_cache(maxsize=None)
def model(name: str) -> nn.Module:
    """The seed-0, 10-class model, built once per session."""
    return zoo.build(name)


@functools.lru_cache(maxsize=None)
def traced(name: str) -> fx.GraphModule:
    return fx.symbolic_trace(model(name))


def test_names() -> None:
    assert zoo.MODELS == ("convnet", "alexnet", "vgg16", "resnet18", "resnet50", "mobilenet", "squeezenet")
    assert zoo.DEFAULT_MODEL == "resnet18" and zoo.DEFAULT_MODEL in zoo.MODELS


@pytest.mark.parametrize("call", [zoo.build, zoo.input_shape, zoo.sample_input])
def test_unknown_name_lists_the_known_ones(call: object) -> None:
    with pytest.raises(ValueError, match="resnet18") as info:
        call("resnet19")  # type: ignore[operator]
    assert all(name in str(info.value) for name in zoo.MODELS)


def test_input_shapes() -> None:
    assert zoo.input_shape("convnet") == (1, 3, 32, 32)
    assert zoo.input_shape("resnet50", 4) == (4, 3, 224, 224)
    assert zoo.input_shape("alexnet", 2, small=True) == (2, 3, 64, 64)
    x = zoo.sample_input("vgg16", 2, small=True, seed=3, dtype=torch.float64)
    assert x.shape == (2, 3, 64, 64) and x.dtype == torch.float64
    assert torch.equal(x, zoo.sample_input("vgg16", 2, small=True, seed=3, dtype=torch.float64))
    assert not torch.equal(x, zoo.sample_input("vgg16", 2, small=True, seed=4, dtype=torch.float64))
    with pytest.raises(ValueError):
        zoo.input_shape("convnet", 0)


@pytest.mark.parametrize("name", zoo.MODELS)
def test_deterministic_eval_and_rng_untouched(name: str) -> None:
    state = torch.get_rng_state()
    a, b, c = model(name).state_dict(), zoo.build(name).state_dict(), zoo.build(name, seed=1).state_dict()
    assert torch.equal(state, torch.get_rng_state()), "build() drew from the global RNG"
    assert not any(m.training for m in model(name).modules())
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


@pytest.mark.parametrize("name", zoo.MODELS)
def test_forward_and_fx_trace(name: str) -> None:
    x = zoo.sample_input(name, 2, small=True)
    with torch.no_grad():
        out = model(name)(x)
        again = traced(name)(x)
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all() and out.abs().max() < 1e3
    assert out.std() > 1e-2, "degenerate output"
    assert not torch.allclose(out[0], out[1]), "output does not depend on the input"
    assert_close(again, out, **network_terms(model(name)))


@pytest.mark.parametrize("name", ["convnet", "alexnet", "squeezenet", "mobilenet", "resnet18"])
def test_standard_input(name: str) -> None:
    with torch.no_grad():
        out = model(name)(zoo.sample_input(name))
    assert out.shape == (1, 10) and torch.isfinite(out).all()


def count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("name", zoo.MODELS)
def test_parameter_counts_match_torchvision(name: str) -> None:
    with torch.device("meta"):  # the architecture only: no memory, no init
        net, net10 = zoo._BUILDERS[name](1000), zoo._BUILDERS[name](10)
    assert count(net10) == count(model(name)), "build() is not the architecture"
    if name in TORCHVISION_PARAMS:
        assert count(net) == TORCHVISION_PARAMS[name]


def test_dtype_and_num_classes() -> None:
    net = zoo.build("convnet", num_classes=7, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in net.parameters())
    assert torch.equal(net.conv1.weight, model("convnet").conv1.weight.double())  # drawn in float32, then cast
    with torch.no_grad():
        assert net(zoo.sample_input("convnet", 3, dtype=torch.float64)).shape == (3, 7)
    with pytest.raises(ValueError):
        zoo.build("convnet", num_classes=0)


def test_layer_types_are_the_swappable_ones() -> None:
    allowed = (nn.Conv2d, nn.Linear, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.ReLU, nn.Flatten,
               nn.BatchNorm2d, nn.Dropout)  # fmt: skip
    seen: set[type] = set()
    for name in zoo.MODELS:
        leaves = [m for m in model(name).modules() if not list(m.children())]
        seen |= {type(m) for m in leaves}
        assert all(isinstance(m, allowed) for m in leaves), name
        assert all(not m.inplace for m in leaves if isinstance(m, nn.ReLU)), name
    assert seen == set(allowed)


def call_targets(name: str, op: str) -> list[object]:
    return [n.target for n in traced(name).graph.nodes if n.op == op]


def test_relu_modules_are_distinct_except_in_resnet_blocks() -> None:
    for name in zoo.MODELS:
        calls = [t for t in call_targets(name, "call_module") if isinstance(t, str) and t.endswith("relu")]
        repeated = {t for t in calls if calls.count(t) > 1}
        if name.startswith("resnet"):
            assert repeated and all(".relu" in t and t.startswith("layer") for t in repeated), name
        else:
            assert not repeated, name
    relus = [m for m in model("vgg16").modules() if isinstance(m, nn.ReLU)]
    assert len({id(m) for m in relus}) == len(relus) == 15


def test_graph_features() -> None:
    assert torch.cat in call_targets("squeezenet", "call_function")
    assert {"view", "size"} <= set(call_targets("alexnet", "call_method"))
    assert torch.flatten in call_targets("vgg16", "call_function")
    assert torch.nn.functional.relu in call_targets("convnet", "call_function")
    for name in ("resnet18", "resnet50"):
        adds = [t for t in call_targets(name, "call_function") if t in (operator.add, operator.iadd)]
        assert len(adds) == (8 if name == "resnet18" else 16)


def test_mobilenet_is_depthwise_separable() -> None:
    convs = [m for m in model("mobilenet").modules() if isinstance(m, nn.Conv2d)]
    depthwise = [c for c in convs if c.groups == c.in_channels == c.out_channels > 1 and c.kernel_size == (3, 3)]
    pointwise = [c for c in convs if c.groups == 1 and c.kernel_size == (1, 1)]
    assert len(depthwise) == len(pointwise) == 13
    narrow = zoo.MobileNetV1(num_classes=10, width=0.5)
    assert max(m.out_channels for m in narrow.modules() if isinstance(m, nn.Conv2d)) == 512


@pytest.mark.parametrize("name", WITH_BATCH_NORM)
def test_batch_norm_state_is_not_trivial(name: str) -> None:
    bns = [m for m in model(name).modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert bn.running_mean.abs().min() > 0 and (bn.running_var - 1).abs().min() > 0
        assert bn.running_var.min() > 0.1
        assert (bn.weight != 1).all() and (bn.bias != 0).all()
        assert bn.running_mean.std() > 0.05 and bn.running_var.std() > 0.05


def test_import_algoswap_does_not_import_torch_or_the_zoo() -> None:
    code = "import sys, algoswap; assert 'torch' not in sys.modules and 'algoswap.zoo' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_foreign_models_build_by_name_deterministically_without_touching_the_global_rng() -> None:
    if importlib.util.find_spec("timm") is None or importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision and timm are not installed (make setup-test installs them)")
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = zoo.build("torchvision:mobilenet_v2", num_classes=7, seed=3)
    assert torch.equal(torch.rand(1), before)  # the global RNG is where it was
    second = zoo.build("torchvision:mobilenet_v2", num_classes=7, seed=3)
    x = zoo.sample_input("torchvision:mobilenet_v2", 2, small=True)
    with torch.no_grad():
        assert torch.equal(first(x), second(x)) and first(x).shape == (2, 7)
    bn = next(m for m in first.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.equal(bn.running_var, torch.ones_like(bn.running_var))  # folding bugs would show
    vit = zoo.build("torchvision:vit_b_16", num_classes=5)
    assert vit.heads.head.weight.any()  # not torchvision's zero head: outputs depend on the input
    assert zoo.build("timm:resnet18", num_classes=4).fc.out_features == 4
    with pytest.raises(ValueError, match="no model 'nope'"):
        zoo.build("torchvision:nope")
