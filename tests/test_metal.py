"""The Metal plugin (algoswap-metal) where there is no Mac: it is discovered, listed in the capability matrix and
says why it cannot run, imports nothing heavy to say so; its memory space moves arrays, and the ``mps`` backend's
op wrappers (attributes and padding mapped onto torch's functions) conform to the reference with torch's CPU device
standing in for mps. Its own kernels run on the host in tests/test_metal_kernels.py. On a Mac the conformance suites
run on the real device (plugins/metal_backend/verify_on_mac.sh).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import algoswap
from algoswap.testing._cases import bind
from algoswap.testing._conformance import check_conformance
from algoswap.testing._nonfinite_check import check_nonfinite, reference_oracle
from helpers import HANG_SECONDS, derived_seed, fail

algoswap_metal = pytest.importorskip("algoswap_metal", reason="algoswap-metal is not installed")
pytest.importorskip("torch", reason="the mps backend's modules are written on torch")

ROOT = Path(__file__).resolve().parents[1]
_registry = algoswap.registry()
pytestmark = pytest.mark.skipif("mps" not in _registry.backends, reason="algoswap-metal is not installed (no entry point)")
on_a_mac = sys.platform == "darwin"
MPS_IMPLEMENTATIONS = sorted((i for i in _registry.implementations() if i.backend == "mps"), key=lambda i: (i.op, i.algorithm))


@pytest.fixture
def cpu_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch's CPU device in the mps device's place."""
    from algoswap_metal import _device
    from algoswap_metal.metal import _launch

    monkeypatch.setattr(_device, "DEVICE_TYPE", "cpu")
    _launch.forget()
    yield
    _launch.forget()


@pytest.mark.skipif(on_a_mac, reason="on a Mac the backends may run")
def test_both_backends_are_discovered_and_say_why_they_cannot_run() -> None:
    record = next(p for p in algoswap.plugins() if "metal" in p.backends)
    assert record.status == "loaded" and record.distribution == "algoswap-metal" and set(record.backends) == {"mps", "metal"}
    for name in ("mps", "metal"):
        backend = _registry.backends[name]
        assert backend.memory.name == "mps" and backend.device == "mps"
        reason = backend.availability()
        assert isinstance(reason, str) and reason.startswith("needs macOS on Apple silicon with torch built with MPS"), reason


@pytest.mark.skipif(on_a_mac, reason="on a Mac the probe imports torch")
def test_saying_so_imports_no_torch_and_no_op_module() -> None:
    """Discovery and the probes import the hook module, the probe's and (add_family finding the op modules'
    functions by name) the two docstring-only packages above them: nothing that imports torch."""
    code = ("import sys, algoswap; r = algoswap.registry(); print(r.backends['mps'].availability()); "
            "print(r.backends['metal'].availability()); loaded = sorted(m for m in sys.modules if m == 'torch' "
            "or m.startswith(('algoswap_metal.', 'torch.'))); print(loaded)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stderr
    loaded = set(eval(done.stdout.splitlines()[-1]))
    assert loaded <= {"algoswap_metal._probe", "algoswap_metal.metal", "algoswap_metal.mps"}, loaded  # no torch, no op module


def test_the_capability_matrix_lists_what_each_backend_declares() -> None:
    matrix = algoswap.capabilities()
    assert set(matrix.backends_for("conv2d", "mpsgraph")) == {"mps"}
    assert {"smm", "direct"} <= set(matrix.algorithms_for("conv2d", "metal"))
    assert set(matrix.algorithms_for("conv2d_fused", "metal")) == {"smm", "direct"}
    for op in ("maxpool2d", "adaptiveavgpool2d", "relu", "add"):
        assert matrix.algorithms_for(op, "metal") == ["direct"], op
    mps_ops = {i.op for i in MPS_IMPLEMENTATIONS}
    assert {"conv2d", "conv2d_fused", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "silu", "gelu",
            "hardswish", "add", "batchnorm2d", "batchnorm2d_fused", "softmax", "flatten", "reshape", "conv2d_grad_input",
            "linear_grad_weight", "relu_grad"} <= mps_ops
    if not on_a_mac:
        assert "needs macOS on Apple silicon" in matrix.unavailable()["metal"]


def test_a_request_says_why_it_is_not_served() -> None:
    """Here: the backend's reason; on a Mac: host arrays are not moved to the GPU unasked."""
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(algoswap.NoImplementationError, match="needs macOS on Apple silicon|works on mps memory"):
        algoswap.ops.conv2d(x, w, None, algorithm="metal:smm")


def test_the_memory_space_copies_host_arrays_and_wraps_tensors_without_copying(cpu_device: None) -> None:
    import torch

    from algoswap._torch.tensors import device_tensor
    from algoswap_metal import MPS, MpsArray

    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    moved = MPS.upload(host)
    assert isinstance(moved, MpsArray) and moved.shape == (2, 3) and moved.dtype == np.float32
    moved.tensor[0, 0] = 7.0
    assert host[0, 0] == 0.0, "an upload copies"
    back = MPS.download(moved)
    back[1, 1] = -1.0
    assert back[0, 0] == 7.0 and moved.tensor[1, 1] == 4.0, "a download copies"
    tensor = torch.ones(2, 4, dtype=torch.float16)
    wrapped = algoswap_metal._device.from_torch(tensor)
    assert wrapped.tensor.data_ptr() == tensor.data_ptr() and wrapped.dtype == np.float16
    assert device_tensor(wrapped) is wrapped.tensor, "back to torch as the tensor itself (no DLPack)"
    assert wrapped.reshape((8,)).shape == (8,)


@pytest.mark.parametrize("impl", MPS_IMPLEMENTATIONS, ids=lambda i: f"{i.op}-{i.qualified}")
def test_mps_wrappers_conform_on_the_cpu_device(impl: algoswap.ImplRecord, cpu_device: None, rng: np.random.Generator) -> None:
    dtype = "float32" if "float32" in impl.dtypes else "int64"
    ran, failures = check_conformance(impl, dtype, rng)
    assert ran, f"{impl.qualified} supports none of the cases of {impl.op}"
    if failures:
        fail(f"{impl.op} {impl.qualified} on torch's CPU device:\n" + "\n".join(failures))


@pytest.mark.parametrize("op", ["conv2d", "conv2d_fused"])
def test_mps_convolutions_keep_nan_and_infinity_where_the_definition_has_them(op: str, cpu_device: None) -> None:
    """The padding is done before the convolution: a padding tap multiplies a zero, so an infinite or NaN weight
    gives NaN there, as the reference does (torch's CPU convolution skips such taps: without the padding first,
    4 of the 14 cases failed)."""
    impl = _registry.impls[(op, "mpsgraph", "mps")]
    ran, failures = check_nonfinite(impl, "float32", derived_seed(), reference_oracle)
    assert ran
    if failures:
        fail(f"{op} mps:mpsgraph on torch's CPU device, NaN and infinities:\n" + "\n".join(failures))


@pytest.mark.parametrize("op", ["gelu", "conv2d_fused"])
def test_mps_gelu_keeps_positive_infinity(op: str, cpu_device: None) -> None:
    """gelu(+inf) = +inf whatever torch's kernel does (its vectorised float32 CPU gelu gives NaN on AVX-512): 64
    values, so that a vectorised kernel runs them."""
    from algoswap_metal._device import MpsArray
    from algoswap_metal.mps import activation, conv

    import torch

    arrays = MpsArray(torch.full((1, 1, 8, 8), float("inf")))
    if op == "gelu":
        out = activation.gelu(arrays, approximate="none")
    else:
        weight = MpsArray(torch.ones(1, 1, 1, 1))
        out = conv.conv2d_fused(arrays, weight, None, None, activation="gelu", stride=(1, 1), padding=((0, 0), (0, 0)),
                                dilation=(1, 1), groups=1, padding_mode="zeros")
    assert bool(torch.all(out.tensor == float("inf"))), out.tensor.flatten()[:4]


def test_refusals_say_why() -> None:
    fused = bind("conv2d_fused", ((1, 2, 5, 5), (3, 2, 3, 3), None, None), "float32", {"padding": 1, "activation": "gelu"})
    assert "has no erf" in str(_registry.impls[("conv2d_fused", "smm", "metal")].check(fused))
    pool = bind("adaptiveavgpool2d", ((1, 2, 5, 5),), "float32", {"output_size": 2})
    assert "output_size 1" in str(_registry.impls[("adaptiveavgpool2d", "direct", "metal")].check(pool))
    add = bind("add", ((2, 3), (3,)), "float32", {})
    assert "no broadcasting" in str(_registry.impls[("add", "direct", "metal")].check(add))


def test_verify_on_mac_script_parses() -> None:
    script = ROOT / "plugins" / "metal_backend" / "verify_on_mac.sh"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = script.read_text()
    for step in ("algoswap.testing mps metal", "tests/test_metal_kernels.py", "benchmarks/metal_layers.py", "report"):
        assert step in text, step


def test_the_benchmark_parses_its_arguments_without_a_mac() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "metal_layers.py"), "--help"], capture_output=True,
                          text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0 and "--batch" in done.stdout, done.stdout + done.stderr
