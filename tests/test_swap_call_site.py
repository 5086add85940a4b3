"""A swapped layer's call site (algoswap._torch.prepared.CallSite): a call like the last one reuses what was bound
for it (the prepared call and the parameters' views) after a check of all that can change between calls; anything
that changed binds the call again. Each test changes one thing between calls and compares with torch; counting the
binds shows that unchanged calls took the fast path and that the changed one did not."""

from __future__ import annotations

import copy
import pickle
import threading
import types
from typing import Any, Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import algoswap  # noqa: E402
from algoswap._torch import prepared  # noqa: E402
from algoswap._torch.switches import torch_wishes  # noqa: E402
from algoswap._wishes import Wishes  # noqa: E402
from algoswap_numpy import conv as numpy_conv  # noqa: E402
from boxed_backend import MOVES, register_boxed  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402


@pytest.fixture
def binds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ops bound at a call site from now on (a call site's miss)."""
    seen: list[str] = []
    bind = prepared.bind

    def counting(op: str, request: str, attrs: str, inputs: Any) -> Any:
        seen.append(op)
        return bind(op, request, attrs, inputs)

    monkeypatch.setattr(prepared, "bind", counting)
    return seen


@pytest.fixture
def switches() -> Iterator[None]:
    """torch's TF32 and benchmark switches, put back afterwards."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark = flags


@pytest.fixture
def own_plugins(switches: None) -> Iterator[None]:
    """Plugins a test registers (and torch's switches) are gone afterwards."""
    yield
    algoswap.reload_plugins()


def _pair(request: str = "numpy:direct") -> tuple[nn.Conv2d, nn.Module, torch.Tensor]:
    """A float64 conv layer, its twin swapped to ``request``, and an input."""
    torch.manual_seed(5)
    layer = nn.Conv2d(3, 2, 3, padding=1).double()
    return layer, algoswap.swap_conv2d(copy.deepcopy(layer), request), torch.randn(2, 3, 10, 10, dtype=torch.float64)


def _same(swapped: nn.Module, layer: nn.Module, x: torch.Tensor, **terms: Any) -> None:
    with torch.no_grad():
        assert_close(swapped(x), layer(x), **{**network_terms(layer), **terms})


def test_repeated_calls_reuse_the_bound_call_recording_autograd_or_not(binds: list[str]) -> None:
    layer, swapped, x = _pair()
    for _ in range(3):
        _same(swapped, layer, x)
    out = swapped(x.clone().requires_grad_(True))
    assert type(out.grad_fn).__name__ == "EagerCallBackward"
    assert binds == ["conv2d"]


def _fresh_storage(module: nn.Module) -> None:
    """FSDP's way: the storage freed (size 0) and allocated again, then written; meanwhile other memory of
    that size is taken (most likely where the parameter was, so that a view left there would read it)."""
    w = module.weight
    values = w.detach().clone() * 3
    storage = w.untyped_storage()
    nbytes = storage.nbytes()
    storage.resize_(0)
    module.taken = torch.full((nbytes // w.element_size(),), 1e6, dtype=w.dtype, device=w.device)
    storage.resize_(nbytes)
    w.data.copy_(values)


def _same_storage_other_part(module: nn.Module) -> None:
    w = module.weight
    shape, n = w.shape, w.numel()
    torch.manual_seed(9)
    both = torch.randn(2 * n, dtype=w.dtype, device=w.device)
    w.data = both[:n].view(shape)
    module(torch.zeros(1, 3, 10, 10, dtype=w.dtype, device=w.device))  # bound to the first half
    w.data = both[n:].view(shape)  # same storage, another data pointer


CHANGES = {  # name -> (change applied to each module, whether the call binds again: None where the data pointer moved)
    "in place (no version bump)": (lambda m: m.weight.data.mul_(2), False),
    "new .data": (lambda m: setattr(m.weight, "data", m.weight.data * 3), True),
    "replaced parameter": (lambda m: setattr(m, "weight", nn.Parameter(m.weight.detach() * 3)), True),
    "transposed .data (same pointer, strides)": (lambda m: setattr(m.weight, "data", m.weight.data.transpose(2, 3)), True),
    "reshaped .data (same pointer, shape and strides)": (lambda m: setattr(m.weight, "data", m.weight.data.view(2, 3, 9, 1)), True),
    "narrowed .data (same pointer and strides, shape)": (lambda m: setattr(m.weight, "data", m.weight.data[..., :2]), True),
    "another part of one storage": (_same_storage_other_part, True),
    "storage freed and allocated again (FSDP)": (_fresh_storage, None),
}


def _check_change(binds: list[str], name: str, layer: nn.Module, swapped: nn.Module, x: torch.Tensor, **terms: Any) -> None:
    change, rebinds = CHANGES[name]
    _same(swapped, layer, x, **terms)
    assert type(swapped.algoswap_site.last.checks[1]).__name__ == "_Kept"  # the weight's view is kept
    pointer = swapped.weight.data_ptr()
    for module in (layer, swapped):
        with torch.no_grad():
            change(module)
    if rebinds is None:
        rebinds = swapped.weight.data_ptr() != pointer
    bound = len(binds)
    _same(swapped, layer, x, **terms)
    _same(swapped, layer, x, **terms)
    assert len(binds) == bound + rebinds, binds


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_parameter_changed_between_calls_is_never_served_from_a_stale_view(binds: list[str], name: str) -> None:
    _check_change(binds, name, *_pair())


def _cuda_unavailable() -> str:
    backend = algoswap.registry().backends.get("cuda")
    available = backend.availability() if backend is not None else "algoswap-cuda is not installed"
    return "" if available is True else f"cuda backend unavailable: {available}"


@pytest.mark.skipif(bool(_cuda_unavailable()), reason=_cuda_unavailable())
@pytest.mark.parametrize("name", list(CHANGES))
def test_a_cuda_parameters_kept_dlpack_view_is_never_stale(binds: list[str], switches: None, name: str) -> None:
    """The same on the GPU, where the kept views are the backend's DLPack imports of the parameters (TF32 off
    on both sides, unless ALGOSWAP_CUDA_TF32 overrides: the TF32 bound)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(5)
    layer = nn.Conv2d(3, 2, 3, padding=1).cuda()
    swapped = algoswap.swap_conv2d(copy.deepcopy(layer), "cuda:guess")
    _check_change(binds, name, layer, swapped, torch.randn(2, 3, 10, 10, device="cuda"), dtype="tfloat32")


def test_a_parameter_reinterpreted_as_another_dtype_is_checked_again() -> None:
    """Same pointer, shape and strides, another dtype: refused as torch refuses it, not run on the float64 view."""
    layer, swapped, x = _pair()
    _same(swapped, layer, x)
    swapped.weight.requires_grad_(False)  # (torch allows integer data only then)
    swapped.weight.data = swapped.weight.data.view(torch.int64)
    with torch.no_grad(), pytest.raises(algoswap.AlgoswapError, match="int64"):
        swapped(x)


def test_attributes_changed_after_a_call_bind_again(binds: list[str]) -> None:
    layer, swapped, x = _pair()
    _same(swapped, layer, x)
    for stride in (2, 1):
        layer.stride = swapped.stride = (stride, stride)
        _same(swapped, layer, x)
    assert binds == ["conv2d"] * 3


def test_input_shape_dtype_and_memory_order_changes(binds: list[str]) -> None:
    layer, swapped, x = _pair()
    _same(swapped, layer, x)
    _same(swapped, layer, x[:1])  # another batch: bound again
    assert binds == ["conv2d"] * 2
    strided = torch.randn(1, 3, 10, 10, dtype=torch.float64).transpose(2, 3)
    assert not strided.is_contiguous()
    _same(swapped, layer, strided)  # same shape and dtype: the bound call, the input copied as ever
    assert binds == ["conv2d"] * 2
    layer.float()
    swapped.float()
    _same(swapped, layer, x.float())  # another dtype (and new parameter data)
    assert binds == ["conv2d"] * 3


def test_an_input_of_another_dtype_or_device_is_checked_again() -> None:
    """Refused as torch refuses it (float32 input, float64 weights; a device no backend serves), not run as the
    last call was."""
    layer, swapped, x = _pair()
    _same(swapped, layer, x)
    with torch.no_grad():
        with pytest.raises(algoswap.OpDtypeError, match="argument 'weight' got 'float64'; expected float32"):
            swapped(x.float())
        with pytest.raises(algoswap.NoImplementationError, match="the inputs are in meta memory"):
            swapped(x.to("meta"))


def _spy_plugin(name: str, priority: int, calls: list[Any]) -> None:
    """A backend whose conv2d records (algorithm, the wishes it sees) and computes by the reference."""
    def implementation(algorithm: str) -> Any:
        def run(*arrays: Any, **attrs: Any) -> Any:
            calls.append((algorithm, algoswap.tf32_wish("conv"), algoswap.tf32_wish("matmul"), algoswap.benchmark_wish()))
            return numpy_conv.conv2d_direct(*arrays, **attrs)
        return run

    def register(registry: Any) -> None:
        registry.add_backend(name, priority=priority)
        for algorithm in ("a", "b"):
            registry.add_implementation("conv2d", algorithm, name, implementation(algorithm))

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name=name).status == "loaded"


def test_torchs_switches_flipped_between_calls_are_followed(binds: list[str], own_plugins: None) -> None:
    calls: list[Any] = []
    _spy_plugin("spy", 0, calls)
    layer, swapped, x = _pair("spy:a")
    for conv, matmul, timed in ((True, False, False), (False, True, True), (False, False, False), (True, True, True)):
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul
        torch.backends.cudnn.benchmark = timed
        _same(swapped, layer, x)
        assert calls[-1] == ("a", conv, matmul, timed)
    assert binds == ["conv2d"]


def test_torchs_switches_give_each_wish(switches: None) -> None:
    for conv in (False, True):
        for matmul in (False, True):
            for timed in (False, True):
                torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul
                torch.backends.cudnn.benchmark = timed
                assert torch_wishes() == Wishes(conv, matmul, timed)


def test_a_plugin_registered_between_calls_serves_the_next_call(own_plugins: None) -> None:
    """A registry change (its selection cache emptied) drops every call bound before it."""
    layer, swapped, x = _pair("default")
    _same(swapped, layer, x)
    calls: list[Any] = []
    _spy_plugin("newcomer", 10_000, calls)  # preferred by "default" from now on
    _same(swapped, layer, x)
    assert [call[0] for call in calls] == ["a"]


def test_a_layer_swapped_again_runs_its_new_request(own_plugins: None) -> None:
    calls: list[Any] = []
    _spy_plugin("spy", 0, calls)
    layer, model, x = _pair("spy:a")
    model = nn.Sequential(model)
    _same(model, layer, x)
    algoswap.swap_conv2d(model, "spy:b")
    _same(model, layer, x)
    assert [call[0] for call in calls] == ["a", "b"]


def test_no_call_is_kept_while_the_torch_calls_cache_is_off() -> None:
    limit = algoswap.cache_limits()["torch_calls"].size
    algoswap.set_cache_limit("torch_calls", 0)
    try:
        layer, swapped, x = _pair()
        _same(swapped, layer, x)
        assert swapped.algoswap_site.last is None
    finally:
        algoswap.set_cache_limit("torch_calls", limit)
    _same(swapped, layer, x)
    assert swapped.algoswap_site.last is not None


def test_copies_and_pickles_of_a_called_layer_start_with_their_own_calls() -> None:
    layer, swapped, x = _pair()
    _same(swapped, layer, x)
    for clone in (copy.deepcopy(swapped), pickle.loads(pickle.dumps(swapped))):
        assert clone.algoswap_site is not swapped.algoswap_site and clone.algoswap_site.last is None
        _same(clone, layer, x)
        with torch.no_grad():
            clone.weight.mul_(2)  # its own memory: the original's views know nothing of it
        twice = copy.deepcopy(layer)
        with torch.no_grad():
            twice.weight.mul_(2)
        _same(clone, twice, x)
        _same(swapped, layer, x)


def test_threads_calling_one_layer_with_different_shapes_get_their_own_results() -> None:
    layer, swapped, x = _pair()
    inputs = [x, x[:1], torch.randn(3, 3, 6, 6, dtype=torch.float64)]
    with torch.no_grad():
        expected = [layer(each) for each in inputs]
    failures: list[str] = []

    def work(index: int) -> None:
        try:
            with torch.no_grad():
                for _ in range(40):
                    assert_close(swapped(inputs[index]), expected[index], **network_terms(layer))
        except AssertionError as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_uploads_to_another_memory_space_are_made_at_every_call(own_plugins: None) -> None:
    """Copies are never kept: an in-place update (no version bump) reaches the next call's upload."""
    register_boxed([("conv2d", "direct")], priority=10_000)
    layer, swapped, x = _pair("auto")  # (a named request serves only the inputs' own memory)
    _same(swapped, layer, x)
    for module in (layer, swapped):
        with torch.no_grad():
            module.weight.data.mul_(2)
    MOVES.update(up=0, down=0)
    _same(swapped, layer, x)
    assert MOVES == {"up": 3, "down": 1}


def test_a_channels_last_implementation_still_gets_nhwc_activations(own_plugins: None) -> None:
    """Host arrays reach implementations C-contiguous (the runner skips its check), except where they take NHWC."""
    seen: list[tuple[bool, bool]] = []

    def nhwc(x: np.ndarray, w: np.ndarray, b: Any, **attrs: Any) -> np.ndarray:
        seen.append((x.transpose(0, 2, 3, 1).flags.c_contiguous, w.flags.c_contiguous))
        return numpy_conv.conv2d_direct(x, w, b, **attrs)

    def register(registry: Any) -> None:
        registry.add_backend("nhwc", priority=0)
        registry.add_implementation("conv2d", "direct", "nhwc", nhwc, layout="channels_last")

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="nhwc").status == "loaded"
    layer, swapped, x = _pair("nhwc:direct")
    _same(swapped, layer, x)
    _same(swapped, layer, x)
    assert seen == [(True, True)] * 2


def test_a_backward_pass_that_records_autograd_records_its_gradient_ops() -> None:
    """``create_graph=True``: the gradient ops run as any recording call (their result has a grad_fn), not
    straight to the implementation as in a plain backward pass."""
    torch.manual_seed(2)
    layer = nn.Linear(5, 4).double()
    swapped = algoswap.swap_operation("linear", copy.deepcopy(layer), "numpy:default")
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    got, expected = (torch.autograd.grad((m(x) ** 2).sum(), x, create_graph=True)[0] for m in (swapped, layer))
    assert type(got.grad_fn).__name__ == "EagerCallBackward"
    assert_close(got, expected, **network_terms(layer, backward_of=tuple(x.shape)))
    plain = torch.autograd.grad((swapped(x) ** 2).sum(), x)[0]
    assert plain.grad_fn is None
    assert_close(plain, expected, **network_terms(layer, backward_of=tuple(x.shape)))


def test_dense_channels_last_tensors_cross_to_a_device_backend_as_they_lie() -> None:
    """transfer.crosses_as_is: C-contiguous tensors always; channels-last ones only to implementations that take any
    memory order (a "contiguous" one gets a C-contiguous copy); other strides never (a sliced or transposed view)."""
    from algoswap._torch.transfer import crosses_as_is

    nchw = torch.randn(2, 8, 5, 5)
    nhwc = nchw.contiguous(memory_format=torch.channels_last)
    assert crosses_as_is(nchw, False) and crosses_as_is(nchw, True)
    assert crosses_as_is(nhwc, True) and not crosses_as_is(nhwc, False)
    assert not crosses_as_is(nchw[:, ::2], True) and not crosses_as_is(nchw.transpose(2, 3), True)
