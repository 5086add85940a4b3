"""The oneDNN backend (algoswap-dnnl): what the conformance suite does not cover.

Correctness of every dnnl implementation against the reference is tested by test_conformance.py;
here: kernel names, the Winograd refusal, argument checks, threads, memory, whole models and gradients
(the caches: test_dnnl_caches.py; NaN and infinity: test_dnnl_nonfinite.py).
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import HANG_SECONDS, as_float64, assert_close, derived_seed, network_terms
from algoswap.testing._scales import gradient_scales

algoswap_dnnl = pytest.importorskip("algoswap_dnnl", reason="algoswap-dnnl is not installed")

_available = algoswap.registry().backends["dnnl"].availability() if "dnnl" in algoswap.registry().backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"dnnl backend unavailable: {_available}")

CONV = {"stride": [1, 1], "padding_l": [1, 1], "padding_r": [1, 1], "dilation": [1, 1], "groups": 1}


def ext() -> Any:
    """The compiled extension (imported here, not at collection: an unavailable backend skips)."""
    from algoswap_dnnl._ext import dnnl

    return dnnl


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_default_prefers_dnnl_and_reports_the_kernel() -> None:
    selection = algoswap.select("conv2d", [(1, 64, 28, 28), (64, 64, 3, 3), None], padding=1)
    assert selection.impl.backend == "dnnl"
    assert "jit" in selection.kernel or "brgconv" in selection.kernel, selection.kernel
    for op, shapes, attrs in [
        ("linear", [(8, 256), (10, 256), (10,)], {}),
        ("maxpool2d", [(1, 64, 56, 56)], {"kernel_size": 3, "stride": 2, "padding": 1}),
        ("relu", [(1, 64, 56, 56)], {}),
        ("conv2d_grad_input", [(2, 32, 14, 14), (32, 16, 3, 3)], {"input_size": (2, 16, 14, 14), "padding": 1}),
    ]:
        kernel = algoswap.select(op, shapes, algorithm="dnnl:default", **attrs).kernel
        assert any(word in kernel for word in ("jit", "brg", "gemm", "simple")), (op, kernel)


def test_winograd_is_declared_unsupported_and_onednn_refuses_it() -> None:
    matrix = json.loads(algoswap.capabilities("conv2d").to_json())
    cell = matrix["ops"]["conv2d"]["backends"]["dnnl"]["winograd"]
    assert cell["supported"] is False and "no f32 Winograd" in cell["reason"]
    x = np.ones((1, 64, 28, 28), np.float32)
    w = np.ones((64, 64, 3, 3), np.float32)
    with pytest.raises(ext().DnnlError, match="conv2d: could not create a primitive descriptor.*unimplemented"):
        ext().conv2d_forward(x, w, None, None, algorithm="winograd", layout="any", **CONV)


def test_float64_is_refused_by_selection() -> None:
    with pytest.raises(algoswap.NoImplementationError, match="dtype float64 not supported"):
        algoswap.select("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), None], dtype="float64", algorithm="dnnl:direct")
    assert algoswap.select("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), None], dtype="float64").impl.backend != "dnnl"


def test_the_extension_refuses_wrong_arrays_instead_of_copying() -> None:
    x = np.ones((1, 4, 8, 8), np.float32)
    w = np.ones((8, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match="argument 'input' must be C-contiguous"):
        ext().conv2d_forward(np.ones((1, 4, 8, 16), np.float32)[..., ::2], w, None, None, **CONV)
    with pytest.raises(TypeError, match="argument 'weight' must be float32 or bfloat16, got float64"):
        ext().conv2d_forward(x, w.astype(np.float64), None, None, **CONV)
    with pytest.raises(TypeError, match="must be a numpy.ndarray"):
        ext().relu([1.0, 2.0])
    with pytest.raises(ValueError, match="input channels must equal"):
        ext().conv2d_forward(np.ones((1, 3, 8, 8), np.float32), w, None, None, **CONV)


def test_same_swapped_model_from_four_threads() -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model = algoswap.swap_conv2d(zoo.build("resnet18"), "dnnl:direct", sample_input_shape=(1, 3, 64, 64))
    inputs = [zoo.sample_input("resnet18", 1, small=True, seed=s) for s in range(4)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    results: dict[int, list[Any]] = {i: [] for i in range(4)}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with torch.no_grad():
                for _ in range(5):
                    results[i].append(model(inputs[i]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        for got in results[i]:  # oneDNN may block its sums differently when threads compete: not bitwise equal
            assert_close(got, expected[i], **network_terms(model), context=f"thread {i}")


def test_many_calls_do_not_grow_memory() -> None:
    torch = pytest.importorskip("torch")
    layer = algoswap.swap_conv2d(torch.nn.Conv2d(3, 8, 3, padding=1), "dnnl:direct")
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        for _ in range(500):
            layer(x)
        before = _rss_bytes()
        for _ in range(10_000):
            layer(x)
        grown = _rss_bytes() - before
    assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 10,000 calls"


@pytest.mark.parametrize("algorithm", ["dnnl:direct", "dnnl:auto"])
def test_resnet18_swap_conv2d_matches_torch(algorithm: str) -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model, x = zoo.build("resnet18"), zoo.sample_input("resnet18", 2, small=True)
    with torch.no_grad():
        expected = model(x)
        swapped = algoswap.swap_conv2d(copy.deepcopy(model), algorithm, sample_input_shape=tuple(x.shape))
        assert_close(swapped(x), expected, **network_terms(model))
    assert {row.implementation for row in algoswap.explain(swapped)} == {algorithm}


def test_gradients_run_on_dnnl_and_match_torch() -> None:
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv2d(6, 8, 3, stride=2, padding=(1, 2), groups=2)
    swapped = algoswap.swap_conv2d(copy.deepcopy(conv), "dnnl:direct")
    x = torch.randn(2, 6, 11, 9, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y = conv(x)
    y.square().sum().backward()
    swapped(x2).square().sum().backward()
    scales = gradient_scales("conv2d", [as_float64(x), as_float64(conv.weight), as_float64(conv.bias)],
                             {"stride": 2, "padding": (1, 2), "groups": 2}, 2 * y, y)
    for name, got, expected in [("input", x2.grad, x.grad), ("weight", swapped.weight.grad, conv.weight.grad),
                                ("bias", swapped.bias.grad, conv.bias.grad)]:
        scale, length = scales[name]
        assert_close(got, expected, reduction_length=length, scale=scale, context=f"gradient of {name}")
    call = algoswap.select("conv2d", [(2, 6, 11, 9), (8, 3, 3, 3), (8,)], algorithm="dnnl:direct",
                           stride=2, padding=(1, 2), groups=2)
    from algoswap._torch.bridge import gradient_choices

    assert all(choice.selection.impl.backend == "dnnl" for choice in gradient_choices(call))


def test_new_ops_report_their_kernels() -> None:
    # oneDNN 3.2's softmax backward has jit kernels for AVX-512 only (its forward's, below, name the ISA they run):
    # on a CPU without AVX-512 (e.g. jit:avx2 forward) it runs its reference kernel
    avx512 = "avx512" in algoswap.select("softmax", [(8, 1000)], algorithm="dnnl:default").kernel
    for op, shapes, attrs, words in [
        ("add", [(1, 64, 56, 56), (1, 64, 56, 56)], {}, ("jit",)),
        ("add", [(64, 1, 1), (2, 64, 8, 8)], {}, ("jit",)),  # the broadcast operand may come first
        ("concat", [(2, 3, 8, 8), (2, 5, 8, 8)], {"axis": 1}, ("simple", "jit")),
        ("softmax", [(8, 1000)], {}, ("jit",)),
        ("log_softmax_grad", [(8, 1000), (8, 1000)], {}, ("jit",) if avx512 else ("ref:any",)),
        ("sigmoid_grad", [(4096,), (4096,)], {}, ("jit",)),
        ("leaky_relu", [(1, 64, 56, 56)], {"negative_slope": 0.2}, ("jit",)),
        ("batchnorm2d", [(1, 64, 56, 56), (64,), (64,), (64,), (64,)], {}, ("bnorm", "jit")),
        ("batch_norm_train_grad_input", [(8, 64, 28, 28), (8, 64, 28, 28), (64,)], {}, ("bnorm", "jit")),
        ("layer_norm", [(8, 128, 768), (768,), (768,)], {}, ("jit",)),
        ("layer_norm_grad_weight", [(8, 128, 768), (8, 128, 768)], {}, ("jit",)),
    ]:
        selection = algoswap.select(op, shapes, algorithm="dnnl:default", **attrs)
        assert selection.impl.backend == "dnnl", op
        assert any(word in selection.kernel for word in words), (op, selection.kernel)
    assert "numpy sum" in algoswap.select("layer_norm_grad_bias", [(8, 16)], algorithm="dnnl:default").kernel


def test_add_explains_the_broadcasts_onednn_cannot_run() -> None:
    with pytest.raises(algoswap.NoImplementationError, match="broadcasts only one operand"):
        algoswap.select("add", [(4, 1), (3,)], algorithm="dnnl:direct")
    assert algoswap.select("add", [(4, 1), (3,)]).impl.backend != "dnnl"  # default: another backend serves it


def test_new_ops_refuse_wrong_arrays_and_name_the_op() -> None:
    x = np.ones((2, 3, 4, 4), np.float32)
    with pytest.raises(TypeError, match="softmax: argument 'input' must be float32"):
        ext().softmax(x.astype(np.float64), 1)
    with pytest.raises(ValueError, match="batch_norm: argument 'weight' must have shape"):
        ext().batch_norm(x, None, None, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="add: b must broadcast"):
        ext().add(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="concat: inputs\\[1\\] differs"):
        ext().concat([x, np.ones((2, 3, 5, 4), np.float32)], 1)
    with pytest.raises(ValueError, match="tanh_grad: grad_output and output shapes differ"):
        ext().eltwise_grad(x, x[:1].copy(), "tanh")


def test_resnet18_swap_backend_runs_add_on_dnnl_and_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model, x = zoo.build("resnet18"), zoo.sample_input("resnet18", 1, small=True)
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape), fuse=False)
    with torch.no_grad():
        expected = model(x)
        got = converted(x)
    assert_close(got, expected, **network_terms(model))
    adds = [row for row in algoswap.explain(converted) if row.op == "add"]
    assert len(adds) == 8  # one residual add per basic block
    assert {row.implementation for row in adds} == {"dnnl:direct"}
    assert all("jit" in row.kernel for row in adds), [row.kernel for row in adds]


def test_layout_setting_is_read_when_the_primitive_is_made() -> None:
    import algoswap_dnnl

    x = np.ones((1, 64, 28, 28), dtype=np.float32)
    w = np.ones((64, 64, 3, 3), dtype=np.float32)
    kernels = {}
    try:
        for layout in ("plain", "any"):
            algoswap_dnnl.set_layout(layout)
            kernels[layout] = algoswap.select("conv2d", [x.shape, w.shape, None], "float32", "dnnl:direct", padding=1).kernel
    finally:
        algoswap_dnnl.set_layout(None)
    # "plain" forces plain OIHW weights too: oneDNN falls back to its reference kernel
    assert kernels["plain"].startswith("ref") and kernels["any"].startswith("brgconv"), kernels


ONE_CHANNEL_CONVS = """
import sys
import numpy as np, algoswap
sys.path.insert(0, sys.argv[2])
from algoswap.testing._scales import op_scale
from helpers import mismatch
rng = np.random.default_rng(int(sys.argv[1]))
for (size, kernel, padding) in [(4, 1, 0), (8, 3, 1), (5, 3, 0), (7, 1, 0), (9, 3, 2)]:
    x = rng.standard_normal((1, 1, size, size)).astype(np.float32)
    w = rng.standard_normal((1, 1, kernel, kernel)).astype(np.float32)
    for request in ("dnnl:auto", "dnnl:direct", "default"):
        y = algoswap.ops.conv2d(x, w, None, padding=padding, algorithm=request)
        ref = algoswap.ops.conv2d(x, w, None, padding=padding, algorithm="numpy:direct")
        scale, length = op_scale("conv2d", [x, w, None], {"padding": padding})
        problem = mismatch(y, ref, reduction_length=length, scale=scale)
        assert not problem, (size, kernel, padding, request, problem)
print("ok")
"""


def test_one_channel_convolutions_do_not_corrupt_memory() -> None:
    """With one input and one output channel, NCHW and NHWC descriptors are equal to oneDNN, whose
    primitive cache then served the NCHW plan a primitive made for NHWC (by the supports() check):
    that primitive needs a scratchpad the NCHW descriptor did not ask for, and wrote through a null
    pointer (SIGSEGV, or heap corruption). Run in a child process: a crash must fail the test, not kill it."""
    import subprocess
    import sys

    tests = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", ONE_CHANNEL_CONVS, str(derived_seed()), tests], capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_the_layout_variable_is_read_once_and_set_layout_checks_its_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    import algoswap_dnnl
    from algoswap_dnnl import _settings

    try:
        algoswap_dnnl.set_layout(None)
        monkeypatch.setenv("ALGOSWAP_DNNL_LAYOUT", "any")
        assert _settings.conv_layout() == "any"
        monkeypatch.setenv("ALGOSWAP_DNNL_LAYOUT", "plain")
        assert _settings.conv_layout() == "any"  # read once: not looked up at every call
        with pytest.raises(ValueError, match="layout must be one of auto, plain, any, nhwc or None, got 'blocked'"):
            algoswap_dnnl.set_layout("blocked")
    finally:
        algoswap_dnnl.set_layout(None)


def test_auto_layout_times_nhwc_activations_with_packed_weights_for_channels_last_callers() -> None:
    """layout="auto" chose between the caller's plain layout and oneDNN's blocked one. For a 3-channel stem
    on channels-last arrays the plain layout has only the reference kernel, so the blocked kernel ran, with a
    reorder on each side (2-3x ORT's time at batch 8); the NHWC kernel with packed weights is a candidate now."""
    from algoswap_dnnl._ext import dnnl

    geometry = dict(stride=[2, 2], padding_l=[3, 3], padding_r=[3, 3], dilation=[1, 1], groups=1)
    found = {c.layout: c.impl for c in dnnl.conv2d_forward_candidates([8, 3, 224, 224], [64, 3, 7, 7], True, False,
                                                                      channels_last=True, **geometry)}
    assert found["plain"].startswith("ref") and not found["nhwc"].startswith("ref"), found
    nchw = dnnl.conv2d_forward_candidates([8, 3, 224, 224], [64, 3, 7, 7], True, False, channels_last=False, **geometry)
    assert [c.layout for c in nchw] == ["plain", "any"]
