"""Wishes (algoswap._wishes): the torch front ends wish what torch's switches say at each call
(torch.backends.cudnn.allow_tf32 for convolutions, torch.backends.cuda.matmul.allow_tf32 for matrix
products, torch.backends.cudnn.benchmark for timed engine choice), the functional API wishes nothing,
and the wishes are restored after each call; explain() shows the kernels as a call under torch's switches
would run them. A test backend records what its implementations see. (The CUDA backend's use of the
benchmark wish: tests/test_cuda_benchmark.py.)"""

from __future__ import annotations

import subprocess
import sys
import types
import warnings
from typing import Any, Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import algoswap  # noqa: E402
from algoswap_numpy import conv as numpy_conv  # noqa: E402
from algoswap_numpy import linear as numpy_linear  # noqa: E402
from helpers import HANG_SECONDS  # noqa: E402

SEEN: list[tuple[str, bool | None, bool | None]] = []  # (op, the conv wish, the matmul wish) per call
TIMED: list[tuple[str, bool | None]] = []  # (op, the benchmark wish) per call


def _recording(op: str, fn: Any) -> Any:
    def run(*arrays: Any, **attrs: Any) -> Any:
        SEEN.append((op, algoswap.tf32_wish("conv"), algoswap.tf32_wish("matmul")))
        TIMED.append((op, algoswap.benchmark_wish()))
        return fn(*arrays, **attrs)

    return run


def _wished_kernel(call: Any) -> str:
    return f"timed={algoswap.benchmark_wish()} tf32={algoswap.tf32_wish('conv')}"


@pytest.fixture(autouse=True)
def wishful() -> Iterator[None]:
    """The "wishful" backend (conv2d, its gradients and linear, run by the reference) and torch's switches,
    put back as they were afterwards."""
    def register(registry: Any) -> None:
        registry.add_backend("wishful", priority=100)
        for op, fn in (("conv2d", numpy_conv.conv2d_direct), ("conv2d_grad_input", numpy_conv.conv2d_grad_input),
                       ("conv2d_grad_weight", numpy_conv.conv2d_grad_weight), ("conv2d_grad_bias", numpy_conv.conv2d_grad_bias),
                       ("linear", numpy_linear.linear)):
            registry.add_implementation(op, "direct", "wishful", _recording(op, fn), kernel=_wished_kernel)

    plugin = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=register)
    assert algoswap.register_plugin(plugin, name="wishful").status == "loaded"
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark
    SEEN.clear()
    TIMED.clear()
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark = flags
    algoswap.reload_plugins()


def _switches(conv: bool, matmul: bool) -> None:
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul


def _small() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()


def test_a_swapped_model_wishes_what_torchs_switches_say_at_each_call() -> None:
    model = algoswap.swap_backend(_small(), {"conv2d": "wishful:direct", "linear": "wishful:direct"}, fuse=False)
    x = torch.randn(2, 3, 8, 8)
    _switches(True, False)
    model(x)
    assert SEEN == [("conv2d", True, False), ("linear", True, False)]
    _switches(False, True)  # flipped between calls
    SEEN.clear()
    model.predict(x.numpy(), out_type=np.ndarray)
    assert SEEN == [("conv2d", False, True), ("linear", False, True)]
    assert algoswap.tf32_wish("conv") is None and algoswap.tf32_wish("matmul") is None  # restored after the call
    with algoswap.tf32_wishes(conv=True, matmul=True):
        SEEN.clear()
        model(x)  # the model computes as torch would: its switches, not the caller's wishes
        assert SEEN == [("conv2d", False, True), ("linear", False, True)]
        assert algoswap.tf32_wish("conv") is True  # the caller's wish again after the call


def test_swapped_layers_wish_what_torchs_switches_say_forward_and_backward() -> None:
    module = algoswap.swap_operation("linear", algoswap.swap_conv2d(_small(), "wishful:direct"), "wishful:direct")
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    _switches(False, True)
    out = module(x)
    assert SEEN == [("conv2d", False, True), ("linear", False, True)]
    _switches(True, False)
    SEEN.clear()
    out.sum().backward()
    conv_grads = [entry for entry in SEEN if entry[0].startswith("conv2d_grad")]
    assert len(conv_grads) == 3 and all(entry[1:] == (True, False) for entry in conv_grads)
    assert algoswap.tf32_wish("conv") is None


def test_the_functional_api_wishes_nothing_unless_its_caller_does() -> None:
    x, w, b = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32), np.zeros(3, np.float32)
    _switches(True, True)  # torch's switches are no business of the functional API
    algoswap.ops.call("conv2d", x, w, b, algorithm="wishful:direct")
    with algoswap.tf32_wishes(conv=True):
        algoswap.ops.call("conv2d", x, w, b, algorithm="wishful:direct")
        with algoswap.tf32_wishes(matmul=False):  # the inner block's wishes replace the outer's
            algoswap.ops.call("conv2d", x, w, b, algorithm="wishful:direct")
        assert algoswap.tf32_wish("conv") is True
    assert SEEN == [("conv2d", None, None), ("conv2d", True, None), ("conv2d", None, False)]
    assert algoswap.tf32_wish("conv") is None and algoswap.tf32_wish("matmul") is None


def test_wishes_are_checked() -> None:
    with pytest.raises(algoswap.OpArgumentError, match="tf32_wish: argument 'kind' got 'convolution'; expected one of 'conv', 'matmul'"):
        algoswap.tf32_wish("convolution")
    with pytest.raises(algoswap.OpArgumentError, match="tf32_wishes: argument 'matmul' got 1; expected True, False or None"):
        with algoswap.tf32_wishes(conv=True, matmul=1):  # type: ignore[arg-type]
            pass
    assert algoswap.tf32_wish("conv") is None


def test_torchs_switches_are_read_as_torch_reports_them_without_warnings() -> None:
    from algoswap._torch.switches import torch_tf32

    for conv, matmul in ((True, False), (False, True), (False, False)):
        _switches(conv, matmul)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch_tf32() == (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (conv, matmul)


def test_torchs_newer_precision_settings_are_read_where_the_legacy_switches_refuse() -> None:
    """torch >= 2.9 raises on reading allow_tf32 once its fp32_precision settings disagree with them: the latter
    decide then (in a fresh process: these settings are hard to put back)."""
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("this torch has no fp32_precision settings")
    code = """if True:
        import torch
        from algoswap._torch.switches import torch_tf32
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.conv.fp32_precision = "tf32"  # conv and RNN now differ
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # the legacy matmul precision still says "highest"
        print(torch_tf32())
    """
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(True, True)"


def test_swapped_models_and_layers_wish_timed_engines_as_cudnn_benchmark_says_at_each_call() -> None:
    model = algoswap.swap_backend(_small(), {"conv2d": "wishful:direct", "linear": "wishful:direct"}, fuse=False)
    layers = algoswap.swap_operation("linear", algoswap.swap_conv2d(_small(), "wishful:direct"), "wishful:direct")
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    for timed in (True, False):
        torch.backends.cudnn.benchmark = timed
        model(x.detach())
        out = layers(x)
        out.sum().backward()
        assert {wish for _, wish in TIMED} == {timed} and len(TIMED) == 2 + 2 + 3, TIMED  # conv2d's three gradient ops too
        TIMED.clear()
    assert algoswap.benchmark_wish() is None  # restored after each call


def test_the_functional_api_wishes_no_timing_and_tf32_wishes_keep_the_benchmark_wish() -> None:
    from algoswap._wishes import WISHES, Wishes

    x, w, b = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32), np.zeros(3, np.float32)
    torch.backends.cudnn.benchmark = True  # no business of the functional API
    algoswap.ops.call("conv2d", x, w, b, algorithm="wishful:direct")
    token = WISHES.set(Wishes(benchmark=True))  # as a swapped call wishes
    try:
        with algoswap.tf32_wishes(conv=True):
            algoswap.ops.call("conv2d", x, w, b, algorithm="wishful:direct")
    finally:
        WISHES.reset(token)
    assert TIMED == [("conv2d", None), ("conv2d", True)]
    assert SEEN[-1] == ("conv2d", True, None)


def test_explain_shows_the_kernels_as_a_call_under_torchs_switches_runs_them() -> None:
    """A kernel that depends on the wishes (the CUDA backend's: TF32, timed engines) is named as the layer's
    calls run it, not as a call without wishes would."""
    layers = algoswap.swap_conv2d(_small(), "wishful:direct")
    model = algoswap.swap_backend(_small(), {"conv2d": "wishful:direct", "linear": "wishful:direct"}, fuse=False)
    x = torch.randn(2, 3, 8, 8)
    layers(x)
    model(x)
    for timed, tf32 in ((True, False), (False, True)):
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = timed, tf32
        for explained in (algoswap.explain(layers), algoswap.explain(model)):
            kernels = [row.kernel for row in explained if row.op == "conv2d"]
            assert kernels == [f"timed={timed} tf32={tf32}"], kernels
    assert algoswap.benchmark_wish() is None and algoswap.tf32_wish("conv") is None
