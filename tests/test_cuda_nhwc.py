"""Issue 16's GPU work on channels-last (NHWC) activations, on the GPU: the poolings and element-wise ops on
channels-last inputs (results channels-last, compared with the NumPy reference in float64), the tiled transposes,
the float16 convolutions' one-launch non-finite scan, the fused cuDNN graphs of conv + bias and of hardswish, the
choice for depthwise convolutions, and a swap_backend model whose activations stay NHWC from its first convolution
to its last pooling. GPU only (benchmarks/cuda_device_run.sh); without a GPU every test is skipped with the
backend's reason. tests/test_cuda_host_nhwc.py and tests/test_cuda_fusion_rules.py run the same code on the host.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import assert_close, assert_op_close, derived_seed, network_terms

pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")
ml_dtypes = pytest.importorskip("ml_dtypes")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
HALF = ("float16", "bfloat16")


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(derived_seed(*keys))


def _rounded(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0) -> np.ndarray:
    """Random values representable in ``dtype``, as float64 (the reference sees what the GPU does)."""
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dtype]).astype(np.float64)


def _cp() -> Any:
    import cupy

    return cupy


def _nhwc(array: np.ndarray, dtype: str) -> Any:
    """``array`` on the GPU as ``dtype``, channels-last."""
    cp = _cp()
    return cp.ascontiguousarray(cp.asarray(array.astype(DTYPES[dtype])).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _on_gpu(op: str, *arrays: Any, **attrs: Any) -> Any:
    """``op``'s cuda:direct implementation called on CuPy arrays as they are (algoswap.ops.call takes host
    arrays only): the layout-"any" path a swap_backend model's NHWC activations take."""
    from algoswap._ref import resolve_ref

    record = next(r for r in _registry.implementations(op, "cuda") if r.algorithm == "direct")
    return resolve_ref(record.fn)(*arrays, **_registry.spec(op).canonical_attrs(attrs))


def _channels_last(array: Any) -> bool:
    return bool(array.transpose(0, 2, 3, 1).flags.c_contiguous)


POOLS: dict[str, dict[str, Any]] = {
    "maxpool2d": {"kernel_size": 3, "stride": 2, "padding": 1},
    "avgpool2d": {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    "adaptiveavgpool2d": {"output_size": (1, 1)},
}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("op", sorted(POOLS))
@pytest.mark.parametrize("shape", [(4, 64, 28, 28), (2, 20, 9, 7)])
def test_channels_last_poolings_match_the_reference(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    """A channels-last input reaches the pooling as it is (layout "any") and comes out channels-last (16-byte groups
    of channels, and 20 channels: one by one), with NaN and infinities where torch has them."""
    rng = _rng(len(op), len(dtype), shape[1])
    x = _rounded(rng, shape, dtype)
    x[0, 3, 4, 4], x[1, 5, 2, 6] = np.nan, np.inf
    out = _on_gpu(op, _nhwc(x, dtype), **POOLS[op])
    assert _channels_last(out) or out.shape[2:] == (1, 1), out.strides
    ref = algoswap.ops.call(op, x, algorithm="numpy:default", **POOLS[op])
    assert_op_close(op, _cp().asnumpy(out), ref, [x], POOLS[op], context=f"{op} NHWC {dtype}")


ELEMENTWISE: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "add": (((4, 48, 14, 14), (4, 48, 14, 14)), {}), "mul": (((4, 48, 14, 14), (4, 48, 1, 1)), {}),
    "hardswish": (((4, 48, 14, 14),), {}), "hardsigmoid": (((4, 48, 14, 14),), {}), "relu": (((4, 48, 14, 14),), {}),
    "silu": (((4, 48, 14, 14),), {}), "gelu": (((4, 48, 14, 14),), {"approximate": "none"}),
    "add_scalar": (((4, 48, 14, 14),), {"value": 3.0}),
}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_elementwise_ops_keep_channels_last(op: str, dtype: str) -> None:
    """The ops between convolutions: a channels-last input gives a channels-last result (x * s for s of (N, C, 1, 1)
    by one raw kernel; x + y with y channels-last and C-contiguous)."""
    shapes, attrs = ELEMENTWISE[op]
    rng = _rng(len(op), len(dtype))
    inputs = [_rounded(rng, shape, dtype, 3.0) for shape in shapes]
    for ordered in ([True] * len(inputs), [True, False][:len(inputs)]):
        arrays = [_nhwc(a, dtype) if keep else _cp().asarray(a.astype(DTYPES[dtype])) for a, keep in zip(inputs, ordered)]
        out = _on_gpu(op, *arrays, **attrs)
        assert _channels_last(out), (op, out.strides)
        ref = algoswap.ops.call(op, *inputs, algorithm="numpy:default", **attrs)
        assert_op_close(op, _cp().asnumpy(out), ref, inputs, attrs, context=f"{op} NHWC {dtype}")


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_tiled_transposes_give_the_same_values(dtype: str) -> None:
    from algoswap_cuda import _runtime

    cp, rng = _cp(), _rng(3, len(dtype))
    for shape in ((8, 3, 224, 224), (4, 64, 56, 56), (2, 40, 7, 9), (3, 1, 5, 5)):
        x = cp.asarray(rng.standard_normal(shape).astype(DTYPES[dtype]))
        nhwc = _runtime.channels_last(x)
        assert _channels_last(nhwc) and bool((nhwc == x).all()), shape
        back = _runtime.contiguous(nhwc)
        assert back.flags.c_contiguous and bool((back == x).all()), shape


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_scan_flags_nan_and_infinity_on_the_gpu(dtype: str) -> None:
    """_exact.flag_nonfinite: NaN or an infinity at the head, in the 16-byte body and at the tail of arrays that
    start at every element offset, and in the last of several arrays; finite extremes raise nothing."""
    from algoswap_cuda import _exact

    cp = _cp()
    numpy_dtype = DTYPES[dtype]
    per = 16 // numpy_dtype.itemsize
    largest = float(ml_dtypes.finfo(numpy_dtype).max)
    def one(value: float) -> Any:
        return cp.asarray(np.array([value], numpy_dtype))

    for offset in range(per):
        n = 3 * per + 5 + 100_000 * (offset == 1)
        memory = cp.asarray(np.resize(np.array([largest, -largest, 0.5], numpy_dtype), offset + n))
        x, other = memory[offset:], cp.asarray(np.ones(7, numpy_dtype))
        assert not bool(_exact.flag_nonfinite((x, other)).any()), (dtype, offset)
        for position in (0, per - 1, per + offset, n // 2, n - 2, n - 1):
            for value in (np.nan, np.inf, -np.inf):
                x[position:position + 1] = one(value)
                assert bool(_exact.flag_nonfinite((other, other, x)).any()), (dtype, offset, position, value)
                x[position:position + 1] = one(0.5)


def _reference_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, groups: int = 1) -> np.ndarray:
    return np.asarray(algoswap.ops.call("conv2d", x, w, b, algorithm="numpy:smm", padding=1, groups=groups))


def _hardswish(v: np.ndarray) -> np.ndarray:
    return v * np.clip(v + 3, 0, 6) / 6


def _kernel(op: str, shapes: list[Any], dtype: str, algorithm: str = "guess", **attrs: Any) -> str:
    selection = algoswap.select(op, shapes, dtype=dtype, algorithm=f"cuda:{algorithm}", memory="cuda", padding=1, **attrs)
    print(selection.kernel)
    return str(selection.kernel)


# what a kernel string says where the fused graph is not taken (_fusion's notes)
NOT_FUSED = ("(no fused cuDNN graph builds:", "(the fused cuDNN graph does not run:")


def _fused_or_why(kernel: str, graph: str) -> bool:
    """Whether ``kernel`` runs the fused graph that ends with ``graph`` or says why it does not."""
    return f"{graph}, engine" in kernel or any(reason in kernel for reason in NOT_FUSED)


@pytest.mark.parametrize("dtype", HALF)
def test_a_convolution_with_a_bias_runs_one_cudnn_graph(dtype: str) -> None:
    """conv2d with a bias in half precision (a downsample convolution with its batch norm folded): the fused graph
    conv + bias, or the epilogue pass with the reason the graph did not build."""
    rng = _rng(21, len(dtype))
    x, w, b = _rounded(rng, (4, 64, 14, 14), dtype), _rounded(rng, (128, 64, 3, 3), dtype, 0.1), _rounded(rng, (128,), dtype)
    out = algoswap.ops.call("conv2d", *(a.astype(DTYPES[dtype]) for a in (x, w, b)), algorithm="cuda:guess", transfer=True,
                            padding=1)
    assert_op_close("conv2d", out, _reference_conv(x, w, b), [x, w, b], {"padding": 1}, context=f"conv + bias {dtype}")
    kernel = _kernel("conv2d", [x.shape, w.shape, b.shape], dtype)
    assert _fused_or_why(kernel, "one graph: conv + bias"), kernel


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("residual", [False, True])
def test_hardswish_runs_in_the_cudnn_graph_or_says_why_not(dtype: str, residual: bool) -> None:
    rng = _rng(23, len(dtype), residual)
    x, w = _rounded(rng, (2, 32, 10, 10), dtype), _rounded(rng, (32, 32, 3, 3), dtype, 0.1)
    b, r = _rounded(rng, (32,), dtype), _rounded(rng, (2, 32, 10, 10), dtype) if residual else None
    out = algoswap.ops.call("conv2d_fused", *(None if a is None else a.astype(DTYPES[dtype]) for a in (x, w, b, r)),
                            algorithm="cuda:guess", transfer=True, padding=1, activation="hardswish")
    ref = _hardswish(_reference_conv(x, w, b) + (0 if r is None else r))
    assert_op_close("conv2d_fused", out, ref, [x, w, b, r], {"padding": 1, "activation": "hardswish"},
                    context=f"hardswish {dtype} residual={residual}")
    kernel = _kernel("conv2d_fused", [x.shape, w.shape, b.shape, None if r is None else r.shape], dtype, activation="hardswish")
    assert _fused_or_why(kernel, "+ hardswish"), kernel


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("algorithm", ["guess", "find"])
def test_depthwise_convolutions_say_which_way_they_run(dtype: str, algorithm: str) -> None:
    """guess runs a grouped convolution's plain graph and the epilogue (its rule, in the kernel string); find times
    the fused graph against that and says what it kept."""
    from algoswap_cuda import _fusion

    rng = _rng(27, len(dtype), len(algorithm))
    x, w, b = _rounded(rng, (8, 72, 28, 28), dtype), _rounded(rng, (72, 1, 3, 3), dtype, 0.3), _rounded(rng, (72,), dtype)
    out = algoswap.ops.call("conv2d_fused", *(a.astype(DTYPES[dtype]) for a in (x, w, b)), None, algorithm=f"cuda:{algorithm}",
                            transfer=True, padding=1, groups=72, activation="relu")
    ref = np.maximum(_reference_conv(x, w, b, groups=72), 0)
    assert_op_close("conv2d_fused", out, ref, [x, w, b, None], {"padding": 1, "groups": 72, "activation": "relu"},
                    context=f"depthwise {algorithm} {dtype}")
    kernel = _kernel("conv2d_fused", [x.shape, w.shape, b.shape, None], dtype, algorithm, groups=72, activation="relu")
    if algorithm == "guess":
        assert _fusion.GROUPED in kernel, kernel
    else:
        assert _fused_or_why(kernel, "one graph: conv + bias + relu") or "(find timed the fused graph at" in kernel, kernel


def _small_mobile_net() -> Any:
    """Convolutions with folded batch norms around a max pooling, a depthwise block with squeeze-and-excitation
    (adaptive pooling, x * s), hardswish, an average pooling and a linear head."""
    import torch
    from torch import nn

    class SqueezeExcite(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(channels, channels // 4, 1), nn.Conv2d(channels // 4, channels, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            self.expand = nn.Sequential(nn.Conv2d(32, 64, 1), nn.BatchNorm2d(64), nn.Hardswish())
            self.depthwise = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64), nn.BatchNorm2d(64), nn.ReLU(), SqueezeExcite(64))
            self.project = nn.Sequential(nn.Conv2d(64, 32, 1), nn.BatchNorm2d(32))
            self.head = nn.Sequential(nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.stem(x)
            return self.head(y + self.project(self.depthwise(self.expand(y))))

    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = Net()
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
    return net.eval()


def _layout_copies(monkeypatch: pytest.MonkeyPatch, images_only: bool) -> list[str]:
    """The copies into another memory order made from now on (the runner's through cupy.ascontiguousarray, the
    convolutions' through _transpose), each as "function shape strides"; ``images_only``: copies of (N, C, 1, 1)
    arrays and C-contiguous ones through ascontiguousarray (which cost nothing) are left out."""
    from algoswap_cuda import _transpose

    copies: list[str] = []
    cp = _cp()

    def counted(name: str, function: Any) -> Any:
        def call(array: Any, *args: Any, **kwargs: Any) -> Any:
            if not images_only or name != "ascontiguousarray" or getattr(array, "ndim", 0) == 4 \
                    and array.shape[2] * array.shape[3] > 1 and not array.flags.c_contiguous:
                copies.append(f"{name} {array.shape} {array.strides}")
            return function(array, *args, **kwargs)
        return call

    monkeypatch.setattr(cp, "ascontiguousarray", counted("ascontiguousarray", cp.ascontiguousarray))
    monkeypatch.setattr(_transpose, "to_channels_last", counted("to_channels_last", _transpose.to_channels_last))
    monkeypatch.setattr(_transpose, "to_contiguous", counted("to_contiguous", _transpose.to_contiguous))
    return copies


@pytest.mark.parametrize("dtype", [*HALF, "float32"])
def test_a_tensor_core_model_keeps_its_activations_channels_last(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the input's one NCHW -> NHWC transpose on, no activation map of the model is copied into another memory
    order (the runner's copies go through cupy.ascontiguousarray, the convolutions' through _transpose): none
    around the max pooling, the squeeze-and-excitation or the poolings; and the model computes what the float64
    model does."""
    torch = pytest.importorskip("torch")

    module = _small_mobile_net()
    x = torch.randn(4, 3, 64, 64).to(getattr(torch, dtype)).float()
    with torch.no_grad():
        expected = copy.deepcopy(module).double()(x.double())
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # float32: TF32 as torch has it by default
    model = algoswap.swap_backend(module.cuda(), "cuda:default", tuple(x.shape), dtype=getattr(torch, dtype), capture=False)
    assert model.backends() == ["cuda"], model.explain()
    model(x.cuda())  # plans, and the NHWC copies of the weights
    copies = _layout_copies(monkeypatch, images_only=True)
    got = model(x.cuda())
    size = DTYPES[dtype].itemsize  # float32 without TF32 would run NCHW throughout: no copy at all
    assert copies == [f"to_channels_last (4, 3, 64, 64) {(3 * 64 * 64 * size, 64 * 64 * size, 64 * size, size)}"], copies
    assert_close(got.float().cpu(), expected, dtype="tfloat32" if dtype == "float32" else dtype, **network_terms(module))


def test_a_float16_model_keeps_an_infinity_through_every_convolution_captured_or_not() -> None:
    """cuDNN's float16 engines lose infinities (_exact): an infinity in a model's input reaches its output as the
    float64 model has it, through convolutions that read the flag the previous convolution left (not a scan of
    their input), eagerly, while a CUDA graph is captured, and in its replays; a finite input after it is finite."""
    torch = pytest.importorskip("torch")
    module = _small_mobile_net()
    model = algoswap.swap_backend(copy.deepcopy(module).cuda(), "cuda:default", (4, 3, 64, 64), dtype=torch.float16)
    reference = copy.deepcopy(module).double()
    finite = torch.randn(4, 3, 64, 64).half().float()
    planted = finite.clone()
    planted[1, 2, 17, 40], planted[3, 0, 5, 5] = float("inf"), float("-inf")
    for step, x in enumerate((finite, planted, planted, finite, planted)):  # eager, capture, replays
        with torch.no_grad():
            expected = reference(x.double())
        got = model(x.cuda()).double().cpu()
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf()), \
            f"call {step}: NaN/inf {got.isnan().sum()}/{got.isinf().sum()} where float64 has {expected.isnan().sum()}/{expected.isinf().sum()}"
        kept = torch.isfinite(expected)
        assert_close(got[kept], expected[kept], dtype="float16", **network_terms(module))
    assert "replayed" in str(model.explain()), model.explain()


@pytest.mark.parametrize("dtype", HALF)
def test_swapped_layers_of_a_channels_last_model_take_its_tensors_as_they_lie(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A half-precision torch model in channels-last memory, its convolutions swapped by swap_conv2d: activations and
    weights reach cuDNN as they lie in torch's memory (not copied to NCHW by the bridge and back to NHWC by the
    backend at every call), the padding NaN pass reads the KRSC weight in place, and the layers compute what the
    float64 model does, an infinite weight's NaN at the padding included."""
    torch = pytest.importorskip("torch")

    torch.manual_seed(derived_seed(16))
    module = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1, bias=False))
    with torch.no_grad():  # in the first layer: its input is never 0 (after a relu, inf * 0 would be NaN or not as
        module[0].weight[3, 5, 0, 1] = float("inf")  # a value near 0 rounds to either sign in the half precision)
    x = torch.randn(2, 8, 12, 12).to(getattr(torch, dtype)).double()
    with torch.no_grad():
        expected = copy.deepcopy(module).double()(x)
    half = getattr(torch, dtype)
    swapped = algoswap.swap_conv2d(copy.deepcopy(module).cuda().to(half, memory_format=torch.channels_last), "cuda:guess")
    xc = x.cuda().to(half).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        swapped(xc)  # plans
        copies = _layout_copies(monkeypatch, images_only=False)
        got = swapped(xc)
    assert not copies, copies
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.isnan(expected).any(), "the infinite weight meets the padding: NaN there, as in torch"
    assert_close(got.double().cpu().numpy(), expected.numpy(), dtype=dtype, **network_terms(module))
