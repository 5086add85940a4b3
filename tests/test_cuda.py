"""The CUDA backend (algoswap-cuda): what the conformance suite does not cover.

Without a GPU (CI) only the first tests run: the plugin loads, reports why it is unavailable and
is never chosen. On a GPU machine (benchmarks/cuda_device_run.sh) the rest run: each cuDNN
algorithm name runs the engine it names, TF32 is off unless asked for, torch CUDA tensors cross
zero-copy, zoo models through swap_conv2d and swap_backend match PyTorch on the GPU, and training
steps give PyTorch's gradients.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import HANG_SECONDS, assert_close, network_terms, relative_error

algoswap_cuda = pytest.importorskip("algoswap_cuda", reason="algoswap-cuda is not installed")

_registry = algoswap.registry()
_available = _registry.backends["cuda"].availability() if "cuda" in _registry.backends else "not loaded"
gpu = pytest.mark.skipif(_available is not True, reason=f"cuda backend unavailable: {_available}")
ENGINES = {name: engine for name, engine in algoswap_cuda.ENGINES.items() if name != "winograd"}  # winograd: unsupported
LAYER = {"shapes": [(8, 64, 28, 28), (64, 64, 3, 3), None], "padding": 1}


# ----------------------------------------------------------------------------- without a GPU too

def test_plugin_loads_and_says_why_it_is_unavailable_or_runs() -> None:
    record = next(p for p in algoswap.plugins() if "cuda" in p.backends)
    assert record.status == "loaded" and record.distribution == "algoswap-cuda"
    assert _available is True or any(word in str(_available) for word in ("GPU", "CuPy", "CUDA")), _available
    names = {i.algorithm for i in _registry.implementations("conv2d", backend="cuda")}
    assert set(ENGINES) | {"guess", "find", "direct", "smm"} <= names
    assert ("conv2d", "winograd", "cuda") in _registry.unsupported


def _driver_loads() -> bool:
    from algoswap_cuda import _driver_missing

    return not _driver_missing()


@pytest.mark.skipif(_driver_loads(), reason="a CUDA driver is installed here: the probe asks CuPy")
def test_without_a_driver_the_probe_imports_no_cupy() -> None:
    """Without a CUDA driver the probe is a failed dlopen: CuPy (half a second to import) is never imported."""
    code = ("import sys, algoswap; print(algoswap.registry().backends['cuda'].availability()); "
            "assert not [m for m in sys.modules if m.startswith('cupy')], 'cupy imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0 and "no CUDA driver" in done.stdout, done.stdout + done.stderr


def test_host_arrays_never_go_to_the_gpu_unasked() -> None:
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    reason = "transfer=True" if _available is True else "backend unavailable"
    with pytest.raises(algoswap.NoImplementationError, match=reason):
        algoswap.ops.call("conv2d", x, w, None, algorithm="cuda:smm")
    assert algoswap.select("conv2d", [x.shape, w.shape, None]).impl.backend != "cuda"


def test_tf32_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = pytest.importorskip("algoswap_cuda._runtime", reason="CuPy is not installed")
    monkeypatch.delenv("ALGOSWAP_CUDA_TF32", raising=False)
    assert runtime.tf32() is False
    monkeypatch.setenv("ALGOSWAP_CUDA_TF32", "1")
    assert runtime.tf32() is True
    runtime.set_tf32(False)
    try:
        assert runtime.tf32() is False
    finally:
        runtime.set_tf32(None)


# --------------------------------------------------------------------------------- on the GPU


def _call(op: str = "conv2d", **attrs: object) -> algoswap.OpCall:
    shapes = attrs.pop("shapes", LAYER["shapes"])
    attrs = {"padding": LAYER["padding"], **attrs}
    return _registry.spec(op).bind(shapes, ["float32" if s else None for s in shapes], attrs)  # type: ignore[union-attr]


@gpu
@pytest.mark.parametrize("algorithm", sorted(ENGINES))
def test_each_name_runs_the_engine_it_names(algorithm: str) -> None:
    from algoswap_cuda import _cudnn

    selection = algoswap.select("conv2d", LAYER["shapes"], algorithm=f"cuda:{algorithm}", memory="cuda", padding=1)
    plan = _cudnn.plan(_cudnn.Geometry("fprop", (8, 64, 28, 28), (64, 64, 3, 3), (8, 64, 28, 28), (1, 1), (1, 1), (1, 1), (1, 1)), algorithm)
    engine = ENGINES[algorithm]
    assert plan.engine == engine and plan.name.split("_")[0] == f"eng{engine}", plan.name  # cuDNN's own name for it
    assert f"eng{engine}" in selection.kernel
    g = plan.geometry
    expected = _cudnn.EXPECTED_NOTE.get(algorithm)
    assert _cudnn.notes(g, engine) == ({expected} if expected else set())
    im2col_bytes = 8 * 64 * 9 * 28 * 28 * 4
    if algorithm == "implicit_gemm":
        assert plan.workspace == 0
    if algorithm == "implicit_precomp_gemm":
        assert 0 < plan.workspace < im2col_bytes // 100  # precomputed offsets only
    if algorithm == "gemm":
        assert plan.workspace == im2col_bytes  # the explicit im2col matrix
    if algorithm == "fft_tiling":
        assert plan.workspace < _cudnn.plan(g, "fft").workspace  # tiles need less than whole-image FFTs


@gpu
def test_guess_uses_tf32_only_when_allowed() -> None:
    import algoswap_cuda
    from algoswap_cuda import _cudnn

    x = np.random.default_rng(1).standard_normal((32, 64, 56, 56)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((64, 64, 3, 3)).astype(np.float32)
    ref = algoswap.ops.call("conv2d", x.astype(np.float64), w.astype(np.float64), None, algorithm="numpy:smm", padding=1)
    g = _cudnn.Geometry("fprop", x.shape, w.shape, x.shape, (1, 1), (1, 1), (1, 1), (1, 1))
    errors = {}
    for tf32 in (False, True):
        algoswap_cuda.set_tf32(tf32)
        try:
            plan = _cudnn.plan(g, "guess")
            y = algoswap.ops.call("conv2d", x, w, None, algorithm="cuda:guess", transfer=True, padding=1)
            errors[tf32] = (relative_error(y, ref), "TENSOR_CORE" in (_cudnn.notes(g, plan.engine) or ()))
        finally:
            algoswap_cuda.set_tf32(None)
    assert errors[False][0] < 2e-5 and not errors[False][1], errors
    assert errors[True][0] > 2e-5, errors  # TF32 rounds inputs to 10 mantissa bits: measurably less exact


@gpu
def test_torch_cuda_tensors_cross_without_copies() -> None:
    torch = pytest.importorskip("torch")
    from algoswap_cuda import _runtime

    t = torch.randn(4, 5, device="cuda")
    assert _runtime.from_dlpack(t).data.ptr == t.data_ptr()
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    expected = conv(x)
    swapped = algoswap.swap_conv2d(copy.deepcopy(conv), "cuda:guess")
    got = swapped(x)
    assert got.device.type == "cuda"
    assert_close(got, expected, dtype="tfloat32", **network_terms(conv))  # TF32 may be on
    cpu = algoswap.swap_conv2d(copy.deepcopy(conv).cpu(), "cuda:guess")
    with pytest.raises(algoswap.NoImplementationError, match="cuda memory"):
        cpu(x.cpu())


@gpu
def test_device_arrays_cross_to_torch_on_its_current_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Results enter torch as torch.utils.dlpack.from_dlpack would take them (the producer told torch's current
    stream: 1 for the default one), without going through it (its Python part costs ~20 us a call)."""
    torch = pytest.importorskip("torch")
    import cupy as cp
    from algoswap._torch.tensors import device_tensor

    class Recording:
        def __init__(self, array: Any) -> None:
            self.array = array
            self.streams: list[Any] = []

        def __dlpack_device__(self) -> Any:
            return self.array.__dlpack_device__()

        def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
            self.streams.append(stream)
            return self.array.__dlpack__(stream=stream, **kwargs)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("torch.utils.dlpack.from_dlpack was called")

    monkeypatch.setattr(torch.utils.dlpack, "from_dlpack", refused)
    value = Recording(cp.arange(6, dtype=cp.float32))
    side = torch.cuda.Stream()
    on_default = device_tensor(value)
    with torch.cuda.stream(side):
        on_side = device_tensor(value)
    torch.cuda.synchronize()
    assert on_default.tolist() == on_side.tolist() == list(range(6))
    assert on_side.data_ptr() == value.array.data.ptr
    assert value.streams == [1, side.cuda_stream]


@gpu
def test_frozen_host_weights_are_uploaded_once() -> None:
    from algoswap_cuda import _runtime

    w = algoswap.freeze(np.ones((64, 64), np.float32))
    assert _runtime.from_host(w) is _runtime.from_host(w)
    before = _runtime.uploads_cached()
    del w
    assert _runtime.uploads_cached() == before - 1


@gpu
def test_a_read_only_view_of_a_changing_array_is_uploaded_at_every_call() -> None:
    """Issue 12, defect 2: a read-only view sees every write to its base; its GPU copy went stale."""
    from algoswap_cuda import _runtime

    base = np.ones((64, 64), np.float32)
    w = base.view()
    w.setflags(write=False)
    first = _runtime.to_host(_runtime.from_host(w))
    base *= 2
    np.testing.assert_array_equal(_runtime.to_host(_runtime.from_host(w)), 2 * first)


def _cuda_conv_algorithms() -> list[str]:
    return [f"cuda:{name}" for name in ("guess", "find", "smm", "direct", *ENGINES)]


@gpu
@pytest.mark.parametrize("algorithm", _cuda_conv_algorithms())
@pytest.mark.parametrize("name", algoswap.zoo.MODELS)
def test_zoo_models_through_swap_conv2d_on_the_gpu(name: str, algorithm: str) -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = algoswap.zoo.build(name).cuda()
    x = algoswap.zoo.sample_input(name, 2, small=True).cuda()
    with torch.no_grad():
        expected = model(x)
        swapped = algoswap.swap_conv2d(copy.deepcopy(model), algoswap.prefer(algorithm), sample_input_shape=tuple(x.shape))
        got = swapped(x)
    assert got.device.type == "cuda"
    assert_close(got, expected, **network_terms(model))
    ran = {row.implementation for row in algoswap.explain(swapped)}
    if algorithm in ("cuda:guess", "cuda:find", "cuda:smm", "cuda:direct") or name == "resnet18":
        assert algorithm in ran, ran


@gpu
@pytest.mark.parametrize("name", ["resnet18", "mobilenet", "convnet"])
def test_training_steps_match_pytorch_gradients(name: str) -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = algoswap.zoo.build(name).cuda().train()
    swapped = algoswap.swap_conv2d(copy.deepcopy(model), "cuda:guess")
    optimisers = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (model, swapped)]
    for step in range(3):
        with torch.no_grad():  # both at the same point of the reference's trajectory: gradients comparable
            for mine, theirs in zip(swapped.parameters(), model.parameters(), strict=True):
                mine.copy_(theirs)
        x = algoswap.zoo.sample_input(name, 4, small=True, seed=step).cuda()
        losses = []
        for m, opt in zip((model, swapped), optimisers):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            losses.append(loss.item())
            opt.step()
        # all gradients as one vector: a near-zero gradient tensor differs relatively more between two
        # float32 computations (each gradient op is checked alone by the conformance suite)
        grads = [torch.cat([p.grad.flatten().cpu() for p in m.parameters()]) for m in (model, swapped)]
        backward = network_terms(model, backward_of=tuple(x.shape))
        assert_close(grads[1], grads[0], **backward, context=f"step {step}")
        assert_close(losses[1], losses[0], dtype="float32", ref_dtype="float32", **network_terms(model), context=f"step {step}")


@gpu
@pytest.mark.parametrize("name", ["resnet18", "squeezenet"])
def test_swap_backend_on_the_gpu(name: str) -> None:
    torch = pytest.importorskip("torch")
    torch.backends.cudnn.allow_tf32 = False
    model = algoswap.zoo.build(name).cuda()
    x = algoswap.zoo.sample_input(name, 2, small=True).cuda()
    with torch.no_grad():
        expected = model(x)
    converted = algoswap.swap_backend(model, "auto")
    got = converted(x)
    assert got.device.type == "cuda"
    assert_close(got, expected, **network_terms(model))


@gpu
def test_swap_backend_keeps_values_on_the_gpu() -> None:
    """CUDA inputs stay Resident in GPU memory through a whole ResNet-50: every step runs on cuda,
    no step moves its activations, and the output comes back as a CUDA tensor matching PyTorch."""
    torch = pytest.importorskip("torch")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    module = algoswap.zoo.build("resnet50").cuda()
    x = algoswap.zoo.sample_input("resnet50", 2, small=True, seed=3).cuda()
    with torch.no_grad():
        expected = module(x)
    model = algoswap.swap_backend(module, sample_input_shape=tuple(x.shape))
    got = model(x)
    assert isinstance(got, torch.Tensor) and got.device.type == "cuda"
    assert_close(got, expected, **network_terms(module))
    rows = list(model.explain())
    convs = [row for row in rows if row.op.startswith("conv2d")]
    assert len(convs) == sum(isinstance(m, torch.nn.Conv2d) for m in module.modules())
    assert all(row.implementation.startswith("cuda:") for row in rows), [(r.name, r.implementation) for r in rows]
    assert not [row.note for row in rows if "inputs moved" in row.note]  # every op of ResNet-50 has a CUDA implementation
    assert model.backends() == ["cuda"]


@gpu
def test_swap_backend_fuses_conv_add_relu_on_the_gpu() -> None:
    """ResNet-50's conv → add → relu chains run as cuda conv2d_fused calls (the convolution, then bias,
    residual and relu in one pass) and give what the unfused model and PyTorch give."""
    torch = pytest.importorskip("torch")
    torch.backends.cudnn.allow_tf32 = False
    module = algoswap.zoo.build("resnet50").cuda()
    x = algoswap.zoo.sample_input("resnet50", 2, small=True, seed=5).cuda()
    with torch.no_grad():
        expected = module(x)
    fused = algoswap.swap_backend(module, sample_input_shape=tuple(x.shape))
    unfused = algoswap.swap_backend(module, sample_input_shape=tuple(x.shape), fuse=False)
    got, plain = fused(x), unfused(x)
    rows = list(fused.explain())
    chains = [row for row in rows if row.op in ("conv2d+add+relu", "conv2d+relu")]
    assert sum(row.op == "conv2d+add+relu" for row in chains) == 16 and len(chains) >= 40, [r.op for r in rows]
    assert all(row.implementation == "cuda:guess" and "one CuPy element-wise pass" in row.kernel for row in chains)
    assert_close(got, plain, **network_terms(module), context="fused against unfused")
    assert_close(got, expected, **network_terms(module), context="against torch")


@gpu
def test_swap_backend_fuses_batchnorm_relu_on_the_gpu() -> None:
    """A small torchvision DenseNet: its batch norm → relu pre-activations run as cuda batchnorm2d_fused calls
    (one raw-kernel pass) and give what the unfused model and PyTorch give."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from algoswap._zoo_foreign import import_library

    torch.backends.cudnn.allow_tf32 = False
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = import_library("torchvision").models.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16,
                                                               bn_size=2, num_classes=10).eval().cuda()
        x = torch.randn(2, 3, 32, 32).cuda()
    with torch.no_grad():
        expected = module(x)
    fused = algoswap.swap_backend(module, sample_input_shape=tuple(x.shape))
    unfused = algoswap.swap_backend(module, sample_input_shape=tuple(x.shape), fuse=False)
    got = fused(x)
    chains = [row for row in fused.explain() if row.op == "batchnorm2d+relu"]
    assert len(chains) == 6, [row.op for row in fused.explain()]  # four dense layers, the transition, norm5
    assert all(row.implementation == "cuda:direct" and "one pass" in row.kernel for row in chains), chains
    assert_close(got, unfused(x), **network_terms(module), context="fused against unfused")
    assert_close(got, expected, **network_terms(module), context="against torch")


@gpu
@pytest.mark.parametrize("activation", ["none", *algoswap.FUSED_ACTIVATIONS])
def test_batchnorm2d_fused_keeps_nan_and_inf_as_torch(activation: str, rng: np.random.Generator) -> None:
    """NaN, +inf and -inf in the input (and a zero weight, where inf * 0 is NaN) come out where PyTorch has them,
    on C-contiguous and channels-last input."""
    x = rng.standard_normal((2, 8, 5, 7)).astype(np.float32)
    x[0, 1, 2, 3], x[1, 4, 0, 0], x[1, 5, 4, 6], x[0, 2, 1, 1] = np.nan, np.inf, -np.inf, np.inf
    mean, weight, bias = (rng.standard_normal(8).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    weight[2] = 0.0
    for given in (x, np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
        problem = _against_torch("batchnorm2d_fused", [given, mean, var, weight, bias], "direct", 2e-5, eps=1e-5,
                                 activation=activation)
        assert not problem, f"batchnorm2d_fused, {activation}: {problem}"


# ------------------------------------------------------- NaN and inf as PyTorch has them (issue 12)

def _against_torch(op: str, inputs: list[Any], algorithm: str, tolerance: float, **attrs: Any) -> str:
    """What cuda:<algorithm> gives otherwise than torch's float64 oracle ("" if nothing): NaN, +inf and
    -inf exactly where torch has them (NaN elsewhere too for nan="spreads"), finite entries within ``tolerance``."""
    pytest.importorskip("torch")
    from algoswap.testing._nonfinite import compare
    from torch_oracle import TORCH, to_torch

    call = _registry.spec(op).bind([None if a is None else a.shape for a in inputs],
                                   [None if a is None else str(a.dtype) for a in inputs], attrs)
    expected = TORCH[op](*[to_torch(a) for a in inputs], **call.attrs).detach().numpy()
    got = np.asarray(algoswap.ops.call(op, *inputs, algorithm=f"cuda:{algorithm}", transfer=True, **attrs))
    finite = expected[np.isfinite(expected)]
    scale = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0
    return compare(got, expected, _registry.impls[(op, algorithm, "cuda")].nan, tolerance, scale)


# float32 through cuDNN's engines (FFT and Winograd included) on LAYER's 576-term sums: within 2e-5 of
# float64 on ResNet layers (README), 1e-4 leaves room for the engine guess and find pick
CUDNN_TOLERANCE = 1e-4


@gpu
@pytest.mark.parametrize("op", ["conv2d", "conv2d_fused"])
@pytest.mark.parametrize("algorithm", ["guess", "find", *ENGINES])
def test_cudnn_convolutions_multiply_their_zero_padding(op: str, algorithm: str, rng: np.random.Generator) -> None:
    """cuDNN's engines skip the taps in the zero padding: an inf or NaN weight left the border outputs
    finite or ±inf where PyTorch's zero-padded convolution has 0 * inf = NaN (H200, cuDNN 9.19)."""
    x, w = (rng.standard_normal(shape).astype(np.float32) for shape in LAYER["shapes"][:2])
    w[5, 7, 0, 2], w[9, 3, 2, 2], w[20, 0, 1, 1] = np.inf, np.nan, -np.inf  # two taps reaching the padding, one never
    inputs = [x, w, rng.standard_normal(64).astype(np.float32)]
    attrs: dict[str, Any] = {"padding": LAYER["padding"]}
    if op == "conv2d_fused":
        inputs.append(rng.standard_normal(x.shape).astype(np.float32))
        attrs["activation"] = "relu"
    problem = _against_torch(op, inputs, algorithm, CUDNN_TOLERANCE, **attrs)
    assert not problem, f"{op}, cuda:{algorithm}: {problem}"


@gpu
def test_frozen_weights_known_finite_skip_the_padding_pass_and_others_keep_it(rng: np.random.Generator) -> None:
    """The GPU copy of a frozen finite weight (a swap_backend Model's) is known finite: its convolutions launch no
    padding NaN pass. A frozen weight with an inf, or any other weight, still gets it."""
    from algoswap_cuda import _runtime

    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    assert _runtime.known_finite(_runtime.from_host(algoswap.freeze(w)))
    assert not _runtime.known_finite(_runtime.from_host(w))
    w[2, 1, 0, 0] = np.inf
    frozen = algoswap.freeze(w)
    assert not _runtime.known_finite(_runtime.from_host(frozen))
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    problem = _against_torch("conv2d", [x, frozen, None], "guess", CUDNN_TOLERANCE, padding=1)
    assert not problem, problem


@gpu
def test_cudnn_weight_gradient_multiplies_its_zero_padding(rng: np.random.Generator) -> None:
    """A non-finite grad_output whose window reaches the padding makes dW[o, :, i, j] NaN in PyTorch for
    each tap (i, j) there (0 * inf); cuDNN's engines skipped those taps and left them finite or ±inf."""
    dy, x = (rng.standard_normal(LAYER["shapes"][0]).astype(np.float32) for _ in range(2))
    dy[0, 5, 0, 3], dy[3, 9, 27, 27], dy[1, 20, 14, 14] = np.inf, -np.inf, np.nan  # top row, a corner, inside
    problem = _against_torch("conv2d_grad_weight", [dy, x], "guess", CUDNN_TOLERANCE, weight_size=LAYER["shapes"][1],
                             padding=LAYER["padding"])
    assert not problem, problem


def _sparse(rows: int, cols: int, rng: np.random.Generator) -> Any:
    import scipy.sparse

    dense = rng.standard_normal((rows, cols)).astype(np.float32)
    return scipy.sparse.csr_matrix(np.where(rng.random((rows, cols)) < rng.uniform(0.1, 0.6), dense, 0))


@gpu
@pytest.mark.parametrize("op", ["csrmm", "csrmm_grad_dense"])
def test_csr_products_sum_only_stored_entries(op: str, rng: np.random.Generator) -> None:
    """cuSPARSE's SpMM (CUDA 13, H200) added 0 * dense[0, :] to the product's last row: NaN or inf in the
    dense operand's first row made NaN there, where torch and scipy, summing stored entries, stay finite
    (168 of 200 random trials). Here op(dense) (or grad_output) has NaN and -inf in its first row."""
    pytest.importorskip("scipy.sparse")
    problems = []
    for trial in range(100):
        m, k, n = (300, 200, 64) if trial == 0 else (int(v) for v in rng.integers(1, 9, 3))
        trans_a, trans_b = bool(trial & 1), bool(trial & 2)
        matrix = _sparse(m, k, rng)
        rows = (k if trans_a else m) if op == "csrmm_grad_dense" else (m if trans_a else k)
        dense = rng.standard_normal((rows, n)).astype(np.float32)
        dense[0, 0], dense[0, -1] = np.nan, -np.inf
        if op == "csrmm" and trans_b:
            dense = np.ascontiguousarray(dense.T)  # op(dense) keeps them in its first row
        problem = _against_torch(op, [matrix, dense], "direct", 2e-5, trans_a=trans_a, trans_b=trans_b)
        if problem:
            problems.append(f"trial {trial} ({m}x{k} @ n={n}, trans_a={trans_a}, trans_b={trans_b}): {problem}")
    assert not problems, "\n".join(problems[:5])


@gpu
@pytest.mark.parametrize("name", ["torchvision:vit_b_16", "torchvision:densenet121", "torchvision:convnext_tiny"])
def test_foreign_models_run_every_step_on_the_gpu(name: str) -> None:
    """ViT's class token is broadcast on the host (its only input is a weight): the join with the patch
    embeddings must run on the GPU, not pull the rest of the model onto NumPy (it did: 247 of 251 steps)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision", reason="torchvision is not installed")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = algoswap.zoo.build(name).cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.no_grad():
        expected = model(x)
    converted = algoswap.swap_backend(model)
    got = converted(x)
    host_steps = [s.name for s in converted.program.steps if s.runner is not None and s.backend != "cuda"]
    assert len(host_steps) <= 1, host_steps  # at most ViT's broadcast of its class token
    assert got.device.type == "cuda"
    assert relative_error(got.cpu(), expected.cpu()) < 1e-5


@gpu
def test_a_broadcast_host_view_uploads_whole() -> None:
    """A host value broadcast over the batch (ViT's class token: strides of 0) reaches the GPU with every row."""
    space = _registry.backends["cuda"].memory
    view = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))
    assert np.array_equal(space.download(space.upload(view)), view)
