"""The request resolver (algoswap._requests): one selector grammar, one precedence, one set of errors,
the same through swap_conv2d, swap_backend and the graph executor."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import algoswap
from algoswap import SelectorError, graph as g
from algoswap._requests import Subject, assign, prefer

# ---------------------------------------------------------------------------- the resolver alone


@pytest.fixture
def partial() -> Iterator[str]:
    """A backend implementing relu only (so that "partial:default" lacks sigmoid and conv2d)."""
    def register(registry: Any) -> None:
        registry.add_backend("partial")
        registry.add_implementation("relu", "direct", "partial", lambda x: np.maximum(x, 0))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="partial").status == "loaded"
    yield "partial"
    algoswap.reload_plugins()


def subjects() -> list[Subject]:
    """Two relus and a conv2d in forward order, named as a model's layers are."""
    return [Subject("relu", "act1", "first relu", (1, 4)), Subject("conv2d", "body.conv", "the conv", (1, 3, 8, 8)),
            Subject("relu", "act2", "second relu", (1, 8), own="numpy:direct")]


@pytest.mark.parametrize("selector, expected", [
    (None, ["default", "default", "numpy:direct"]),
    ("numpy:direct", ["numpy:direct"] * 3),                                     # a given request beats the own one
    (["direct", "smm", "default"], ["direct", "smm", "default"]),
    ({"relu": "numpy:direct"}, ["numpy:direct", "default", "numpy:direct"]),
    ({"relu": "direct", "act2": "numpy:default"}, ["direct", "default", "numpy:default"]),  # name beats op
    ({"conv2d": {"body.conv": "fft"}}, ["default", "fft", "numpy:direct"]),
    (lambda target: "smm" if target == "the conv" else "default", ["default", "smm", "default"]),
    (lambda target, shape: "direct" if len(shape) == 2 else "default", ["direct", "default", "direct"]),
])
def test_selector_forms_and_their_precedence(selector: Any, expected: list[str]) -> None:
    assert assign("t", subjects(), selector) == expected


def test_a_whole_model_backend_default_is_a_preference_that_keeps_own_requests(partial: str,
                                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="algoswap"):
        assert assign("t", subjects(), "partial:default") == ["partial:default", "default", "numpy:direct"]
    assert "t: layer 'body.conv' (conv2d): partial has no conv2d implementation; using 'default'" in caplog.text
    with pytest.raises(SelectorError, match=r"layer 'body.conv' \(conv2d, input \(1, 3, 8, 8\)\): conv2d: no implementation "
                                            r"named 'partial:default'"):
        assign("t", subjects(), {"conv2d": "partial:default"})  # asked for the op: not a preference
    with pytest.raises(SelectorError, match=r"got the request 'partial:default' and backends=\['numpy'\]; give one"):
        assign("t", subjects(), "partial:default", ["numpy"])


def test_backends_serve_the_subjects_without_a_request_of_their_own(partial: str) -> None:
    assert assign("t", subjects(), None, [partial, "numpy"]) == ["partial:default", "numpy:default", "numpy:direct"]
    assert assign("t", subjects(), {"act1": "numpy:direct"}, [partial, "numpy"])[0] == "numpy:direct"
    with pytest.raises(SelectorError, match=r"t: layer 'body.conv' \(conv2d, input \(1, 3, 8, 8\)\): none of "
                                            r"backends=\['partial'\] can run it: partial \(no conv2d\); conv2d is implemented by .*numpy"):
        assign("t", subjects(), None, [partial])
    with pytest.raises(SelectorError, match="backends: no backend 'nump' is installed; did you mean 'numpy'"):
        assign("t", subjects(), None, ["nump"])
    with pytest.raises(SelectorError, match="backends must be a list of backend names"):
        assign("t", subjects(), None, "numpy")  # type: ignore[arg-type]


def test_backends_skip_one_that_cannot_serve_the_call_where_the_front_end_can_tell(partial: str) -> None:
    def check(subject: Subject, request: str) -> None:
        if request == "partial:default" and subject.name == "act1":
            raise algoswap.NoImplementationError("relu: partial does not take this input")

    assert assign("t", subjects(), None, [partial, "numpy"], check)[0] == "numpy:default"
    with pytest.raises(SelectorError, match=r"layer 'act1' .*no backend of backends=\['partial'\] serves it:\n"
                                            r"  partial:default: relu: partial does not take this input"):
        assign("t", subjects()[:1], None, [partial], check)


@pytest.mark.parametrize("selector, words", [
    (["smm"], "t: got 1 algorithms for 3 layers (in forward order: act1, body.conv, act2)"),
    ({"conv2d": ["smm", "fft"]}, "t: got 2 algorithms for 1 conv2d layers (in forward order: body.conv)"),
    ({"act3": "smm"}, "t: no op or layer named 'act3'; did you mean 'act2' or 'act1'? (ops: conv2d, relu; layers: act1, body.conv, act2)"),
    ({"conv2d": {"body.cnv": "smm"}}, "t: no conv2d layer named 'body.cnv'; did you mean 'body.conv'? (conv2d layers: body.conv)"),
    (lambda target: 3, "t: layer 'act1' (relu, input (1, 4)): the selector returned 3; expected a string such as 'default'"),
    (lambda target: {}[target], "t: layer 'act1' (relu, input (1, 4)): the selector raised KeyError: 'first relu'"),
    ({"relu": "smm"}, "t: layer 'act1' (relu, input (1, 4)): relu: no implementation named 'smm'"),
    (42, "t: algorithm must be a string, a list, a dict, a function or prefer(...); got int"),
    ({"relu": 42}, "t: the relu selector must be a string, a list, a dict, a function or prefer(...); got int"),
    (prefer("winogard"), "t: prefer('winogard', otherwise='default'): 'winogard' serves no conv2d or relu: conv2d: no implementation named 'winogard'"),
])
def test_selector_errors_name_the_subject(selector: Any, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        assign("t", subjects(), selector)
    assert words in str(caught.value)


@pytest.mark.parametrize("args, kwargs", [((["winograd", "smm"],), {}), (("winograd",), {"otherwise": None})])
def test_prefer_takes_strings(args: Any, kwargs: Any) -> None:
    with pytest.raises(SelectorError, match=r"prefer: each request must be a string such as 'winograd'.*not a list\); got (list|NoneType)"):
        prefer(*args, **kwargs)


def test_functions_of_the_input_shape_and_prefer_need_it() -> None:
    unknown = [Subject("relu", "act", None)]
    with pytest.raises(SelectorError, match=r"layer 'act' \(relu\): the selector takes the input shape; pass sample_input_shape"):
        assign("t", unknown, lambda target, shape: "default")
    with pytest.raises(SelectorError, match=r"layer 'act' \(relu\): prefer\('direct', otherwise='default'\) chooses by the "
                                            r"input shape; pass sample_input_shape"):
        assign("t", unknown, prefer("direct"))


def test_prefer_takes_the_first_request_that_serves_each_subject() -> None:
    def check(subject: Subject, request: str) -> None:
        if request == "winograd" and subject.name == "wide":
            raise algoswap.NoImplementationError("winograd needs a 3x3 kernel")

    convs = [Subject("conv2d", "narrow", None, (1, 3, 8, 8)), Subject("conv2d", "wide", None, (1, 3, 8, 8))]
    assert assign("t", convs, prefer("winograd", "numpy:fft", otherwise="smm"), check=check) == ["winograd", "numpy:fft"]
    assert assign("t", convs, prefer("winograd", otherwise="smm"), check=check) == ["winograd", "smm"]


def test_the_resolver_and_its_error_import_without_torch() -> None:
    code = ("import sys, algoswap, algoswap._requests; algoswap.SelectorError; algoswap.prefer; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------- every front end

torch = pytest.importorskip("torch")
nn = torch.nn

from algoswap._torch.selectors import SelectorError as OldHome  # noqa: E402

SHAPE = (1, 3, 8, 8)


class ThreeConvs(nn.Module):
    """Three convolutions in a row, named alike as modules, fx nodes and graph nodes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv_a, self.conv_b, self.conv_c = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 8, 1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: Any) -> Any:
        return self.conv_c(self.conv_b(self.conv_a(x)))


def by_swap_conv2d(shape: Any = SHAPE, **options: Any) -> list[str]:
    model = algoswap.swap_conv2d(ThreeConvs(), sample_input_shape=shape, **options)
    return [model.conv_a.algoswap_request, model.conv_b.algoswap_request, model.conv_c.algoswap_request]


def by_swap_backend(shape: Any = SHAPE, **options: Any) -> list[str]:
    model = algoswap.swap_backend(ThreeConvs().eval(), sample_input_shape=shape, **options)
    return [s.request for s in model.op_nodes()]


def by_executor(shape: Any = SHAPE, **options: Any) -> list[str]:
    imported = g.from_torch(ThreeConvs(), SHAPE)
    executor = g.Executor([imported.output], **options)
    return [executor.requests(n)[0] for n in g.topological([imported.output]) if n.kind == "op"]


FRONT_ENDS: dict[str, Callable[..., list[str]]] = {"swap_conv2d": by_swap_conv2d, "swap_backend": by_swap_backend,
                                                   "Executor": by_executor}
NOUN = {"swap_conv2d": "layer", "swap_backend": "layer", "Executor": "node"}


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("options, expected", [
    ({}, ["default"] * 3),
    ({"algorithm": "smm"}, ["smm"] * 3),
    ({"algorithm": ["direct", "smm", "fft"]}, ["direct", "smm", "fft"]),
    ({"algorithm": ("direct", "smm", "fft")}, ["direct", "smm", "fft"]),
    ({"algorithm": {"conv_b": "direct"}}, ["default", "direct", "default"]),
    ({"algorithm": lambda target: "fft"}, ["fft"] * 3),
    ({"algorithm": lambda target, shape: "direct" if shape[1] == 3 else "smm"}, ["direct", "smm", "smm"]),
    ({"algorithm": prefer("winograd", otherwise="smm")}, ["winograd", "smm", "winograd"]),  # conv_b is 1x1
    ({"algorithm": "numpy:default"}, ["numpy:default"] * 3),
    ({"backends": ["numpy"]}, ["numpy:default"] * 3),
    ({"algos": "fft"}, ["fft"] * 3),
    ({"algorithms": ["fft", "smm", "direct"]}, ["fft", "smm", "direct"]),
])
def test_the_same_selector_gives_the_same_requests_through_every_front_end(front_end: str, options: dict[str, Any],
                                                                            expected: list[str]) -> None:
    assert FRONT_ENDS[front_end](**options) == expected


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("options, words", [
    ({"algorithm": ["smm"]}, "{caller}: got 1 algorithms for 3 conv2d {noun}s (in forward order: conv_a, conv_b, conv_c)"),
    ({"algorithm": {"conv_d": "smm"}}, "named 'conv_d'"),
    ({"algorithm": lambda target: 3}, "{caller}: {noun} 'conv_a' (conv2d, input (1, 3, 8, 8)): the selector returned 3"),
    ({"algorithm": "winogard"}, "{caller}: {noun} 'conv_a' (conv2d, input (1, 3, 8, 8)): conv2d: no implementation named "
                                "'winogard'; did you mean 'winograd'"),
    ({"algorithm": "winograd"}, "{caller}: {noun} 'conv_b' (conv2d, input (1, 4, 8, 8)): conv2d: no implementation matching "
                                "'winograd'"),
    ({"algorithm": 42}, "must be a string, a list, a dict, a function or prefer(...); got int"),
    ({"algorithm": prefer("winogard")}, "{caller}: prefer('winogard', otherwise='default'): 'winogard' serves no conv2d"),
    ({"backends": ["nump"]}, "{caller}: backends: no backend 'nump' is installed"),
    ({"algorithm": "smm", "algos": "fft"}, "got algorithm= and algos=; pass one"),
    ({"algos": "smm", "algorithms": "fft"}, "got algos= and algorithms=; pass one"),
])
def test_the_same_mistake_gets_the_same_error_through_every_front_end(front_end: str, options: dict[str, Any], words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        FRONT_ENDS[front_end](**options)
    assert words.format(caller=front_end, noun=NOUN[front_end]) in str(caught.value)
    assert isinstance(caught.value, OldHome) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("front_end", ["swap_conv2d", "swap_backend"])
def test_a_function_of_the_input_shape_without_a_sample_shape_is_refused(front_end: str) -> None:
    with pytest.raises(SelectorError, match=r"layer 'conv_a' \(conv2d\): the selector takes the input shape; pass sample_input_shape"):
        FRONT_ENDS[front_end](None, algorithm=lambda target, shape: "smm")


def test_from_torch_takes_the_selector_under_every_name() -> None:
    for name in ("algorithm", "algos", "algorithms"):
        imported = g.from_torch(ThreeConvs(), SHAPE, **{name: {"conv_b": "direct"}})
        assert [n.request for n in g.topological([imported.output]) if n.kind == "op"] == ["default", "direct", "default"]
    with pytest.raises(SelectorError, match="from_torch: got algorithm= and algorithms=; pass one"):
        g.from_torch(ThreeConvs(), SHAPE, algorithm="smm", algorithms="fft")


def test_executor_nodes_keep_their_own_request_below_the_selector_and_above_backends() -> None:
    x = g.placeholder("x", (2, 3))
    own = g.relu(x, name="own", algorithm="numpy:direct")
    plain = g.sigmoid(own, name="plain")
    assert g.Executor([plain], backends=["numpy"]).requests(own) == ["numpy:direct"]
    assert g.Executor([plain], backends=["numpy"]).requests(plain) == ["numpy:default"]
    assert g.Executor([plain], "numpy:default").requests(own) == ["numpy:direct"]  # a preference
    assert g.Executor([plain], {own: "default"}).requests(own) == ["default"]  # by the node itself
    with pytest.raises(SelectorError, match=r"Executor: node 'own' \(relu, input \(2, 3\)\): relu: no implementation named 'fft'"):
        g.Executor([plain], {"relu": "fft"})


# ---------------------------------------------------------------------------- whole models on oneDNN


def _dnnl() -> None:
    record = algoswap.registry().backends.get("dnnl")
    if record is None or record.availability() is not True:
        pytest.skip(f"needs the dnnl backend: {'not installed' if record is None else record.availability()}")


def test_a_resnet_converts_and_runs_preferring_dnnl_with_flatten_on_its_default(rng: np.random.Generator) -> None:
    from algoswap import zoo
    from helpers import assert_close, network_terms

    _dnnl()
    resnet = zoo.build("resnet18").eval()
    x = torch.from_numpy(rng.standard_normal(zoo.input_shape("resnet18", 2, small=True)).astype(np.float32))
    model = algoswap.swap_backend(resnet, "dnnl:default", sample_input_shape=tuple(x.shape))
    rows = {row.name: row for row in model.explain()}
    assert rows["flatten"].request == "default" and rows["flatten"].implementation.split(":")[0] != "dnnl"
    assert {row.request for name, row in rows.items() if name != "flatten"} == {"dnnl:default"}
    with torch.no_grad():
        assert_close(model(x), resnet(x), **network_terms(resnet))


def test_a_resnet_with_backends_dnnl_then_numpy() -> None:
    from algoswap import zoo

    _dnnl()
    resnet = zoo.build("resnet18").eval()
    model = algoswap.swap_backend(resnet, backends=["dnnl", "numpy"], sample_input_shape=zoo.input_shape("resnet18", 1, small=True))
    requests = {row.op.split("+")[0]: row.request for row in model.explain()}
    assert requests.pop("flatten") == "numpy:default" and set(requests.values()) == {"dnnl:default"}
    with pytest.raises(SelectorError, match=r"swap_backend: node 'flatten' \(flatten, input \(1, 512, 1, 1\)\): none of "
                                            r"backends=\['dnnl'\] can run it: dnnl \(no flatten\)"):
        algoswap.swap_backend(resnet, backends=["dnnl"], sample_input_shape=zoo.input_shape("resnet18", 1, small=True))
    with pytest.raises(SelectorError, match=r"node 'flatten' \(flatten\): flatten: no implementation named 'dnnl:default'"):
        algoswap.swap_backend(resnet, {"flatten": "dnnl:default"})  # asked for flatten itself: still an error
