"""The metal backend's own kernels (plugins/metal_backend/algoswap_metal/kernels/*.metal) without a Mac: compiled as
host C++ through tests/metal_shim/ and run by tests/metal_host.py in torch.mps.compile_shader's calling convention,
under the plugin's own Python (CPU tensors in the mps device's place), by the conformance kit's cases against the
reference; once more under AddressSanitizer and ThreadSanitizer; and through a strict check that rejects C++ MSL does
not have. What only a Mac shows (Apple's compiler accepting them, the GPU's numerics, speed) verify_on_mac.sh runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import algoswap
from algoswap.testing._conformance import check_conformance
from algoswap.testing._nonfinite_check import check_nonfinite, reference_oracle
from helpers import derived_seed, fail

pytest.importorskip("algoswap_metal", reason="algoswap-metal is not installed")
torch = pytest.importorskip("torch", reason="the kernels are called on torch tensors")
import metal_host  # noqa: E402 (needs torch)
from algoswap_metal import _device  # noqa: E402
from algoswap_metal.metal import _launch, _params, conv  # noqa: E402

_registry = algoswap.registry()
pytestmark = [pytest.mark.skipif("metal" not in _registry.backends, reason="algoswap-metal is not installed (no entry point)"),
              pytest.mark.skipif(metal_host.COMPILER is None, reason="no host C++ compiler")]
KERNELS = Path(_device.__file__).parent / "kernels"
IMPLEMENTATIONS = sorted((i for i in _registry.implementations() if i.backend == "metal"), key=lambda i: (i.op, i.algorithm))


@pytest.fixture
def on_the_host(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """The plugin's kernels compiled for the host (in the build ``request.param`` names, default plain)."""
    mode = getattr(request, "param", "plain")
    monkeypatch.setattr(_device, "DEVICE_TYPE", "cpu")
    monkeypatch.setattr(_launch, "compile_library", lambda source: metal_host.HostLibrary(source, mode))
    _launch.forget()
    yield
    _launch.forget()


def test_every_shipped_kernel_file_is_compiled() -> None:
    assert sorted(_launch.SOURCES) == sorted(path.name for path in KERNELS.glob("*.metal"))


def test_the_parameter_blocks_match_the_kernels_structs() -> None:
    """The fields _params.py packs, in its order, are the int fields of kernels/common.metal's structs; the padding
    modes and activations are its PAD_* and ACT_* constants; conv.py's tile sizes are gemm.metal's."""
    common = (KERNELS / "common.metal").read_text()
    structs = {}
    for name, body in re.findall(r"struct (\w+) \{(.*?)\};", common, flags=re.S):
        body = re.sub(r"//[^\n]*", "", body)
        fields = []
        for kind, names in re.findall(r"(\w+)\s+([\w\s,]+);", body):
            assert kind == "int", (name, kind)
            fields += [n.strip() for n in names.split(",")]
        structs[name] = tuple(fields)
    assert structs == _params.LAYOUTS
    constants = dict(re.findall(r"constant int (\w+) = (\d+);", common))
    assert {f"PAD_{mode.upper()}": str(value) for mode, value in _params.PADDING_MODES.items()} == {
        k: v for k, v in constants.items() if k.startswith("PAD_")}
    assert {f"ACT_{name.upper()}": str(value) for name, value in _params.ACTIVATIONS.items()} == {
        k: v for k, v in constants.items() if k.startswith("ACT_")}
    gemm = dict(re.findall(r"constant int (\w+) = (\d+);", (KERNELS / "gemm.metal").read_text()))
    assert (int(gemm["SIDE"]), int(gemm["TILE"])) == (conv.SIDE, conv.TILE)


def test_a_parameter_block_refuses_a_missing_field_and_an_overflow() -> None:
    assert _params.pack("CountParams", {"count": 5}) == (5,)
    with pytest.raises(ValueError, match=r"missing fields \['count'\], unknown fields \['size'\]"):
        _params.pack("CountParams", {"size": 5})
    with pytest.raises(ValueError, match="does not fit a 32-bit int"):
        _params.pack("CountParams", {"count": 2**31})


def test_the_kernels_are_msl_by_the_strict_check() -> None:
    errors = metal_host.strict_errors(_launch.source())
    assert errors == "", errors


NOT_MSL = {
    "double": "double y = x[i];",
    "the standard library": "float y = std::max(x[i], 0.0f);",
    "a header": "}\n#include <cmath>\nvoid f() {",
    "a C function MSL lacks": "float y = erf(x[i]);",
    "printf": 'printf("%f", x[i]);',
    "new": "float* y = new float[3];",
    "exceptions": "throw 1;",
    "goto": "goto end; end:;",
}


@pytest.mark.parametrize("what", NOT_MSL)
def test_the_strict_check_rejects_cpp_that_is_not_msl(what: str) -> None:
    kernel = ("kernel void planted(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
              f"    {NOT_MSL[what]}\n}}\n")
    common = (KERNELS / "common.metal").read_text()
    assert metal_host.strict_errors(common + "kernel void plain(device float* x [[buffer(0)]]) { x[0] = 1.0f; }") == ""
    assert metal_host.strict_errors(common + kernel) != "", f"{what} was accepted"


def test_the_runner_keeps_torchs_calling_convention() -> None:
    """Arguments bind to [[buffer(i)]] by position, every buffer present, contiguous; a kernel that synchronises runs
    its threadgroups cooperatively."""
    library = metal_host.HostLibrary(_launch.source())
    cooperative = {name for name, k in library.kernels.items() if k.cooperative}
    assert cooperative == {"gemm", "global_avgpool"}
    x = torch.zeros(4)
    with pytest.raises(TypeError, match="takes 3 buffers, got 2"):
        library.relu(x, x, threads=[4], group_size=[4])
    with pytest.raises(TypeError, match="contiguous CPU tensor"):
        library.relu(torch.zeros(8)[::2], x, torch.tensor([4], dtype=torch.int32), threads=[4], group_size=[4])
    with pytest.raises(ValueError, match=r"buffer indices \[0, 2\]"):
        metal_host.signatures("kernel void k(device float* a [[buffer(0)]], device float* b [[buffer(2)]]) {}")[0].buffers


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda i: f"{i.op}-{i.qualified}")
def test_values_conform_on_the_host(impl: algoswap.ImplRecord, on_the_host: None, rng: np.random.Generator) -> None:
    ran, failures = check_conformance(impl, "float32", rng)
    assert ran, f"{impl.qualified} runs none of the cases of {impl.op}"
    if failures:
        fail(f"{impl.op} {impl.qualified} on the host:\n" + "\n".join(failures))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda i: f"{i.op}-{i.qualified}")
def test_nonfinite_inputs_conform_on_the_host(impl: algoswap.ImplRecord, on_the_host: None) -> None:
    ran, failures = check_nonfinite(impl, "float32", derived_seed(), reference_oracle)
    assert ran
    if failures:
        fail(f"{impl.op} {impl.qualified} on the host, NaN and infinities:\n" + "\n".join(failures))


@pytest.mark.parametrize("on_the_host", ["asan", "tsan"], indirect=True)
def test_every_kernel_under_a_sanitizer(on_the_host: None, rng: np.random.Generator) -> None:
    """Each implementation on the first cases of its op (small shapes), every kernel call one run of the sanitizer
    build; a report fails the call (metal_host.SanitizerReport)."""
    from algoswap.testing import _cases

    for impl in IMPLEMENTATIONS:
        cases = _cases.cases_for(impl.op)
        chosen = [case for case in cases if impl.check(_cases.bind(impl.op, case[0], "float32", case[1])) is True][:3]
        ran, failures = _checked_on(impl, chosen, rng)
        assert ran == len(chosen) and not failures, (impl.qualified, failures)


def _checked_on(impl: algoswap.ImplRecord, cases: list[tuple[tuple[object, ...], dict[str, object]]],
                rng: np.random.Generator) -> tuple[int, list[str]]:
    """check_conformance restricted to ``cases``."""
    from algoswap.testing import _conformance

    original = _conformance.cases_for
    _conformance.cases_for = lambda op: cases  # type: ignore[assignment]
    try:
        return check_conformance(impl, "float32", rng)
    finally:
        _conformance.cases_for = original


def test_address_sanitizer_catches_a_read_past_a_buffer() -> None:
    """A planted bug: relu reading one element past its input."""
    source = _launch.source().replace("activate(x[index], ACT_RELU)", "activate(x[index + 1], ACT_RELU)")
    library = metal_host.HostLibrary(source, "asan")
    x, y = torch.ones(40), torch.zeros(40)
    with pytest.raises(metal_host.SanitizerReport, match="heap-buffer-overflow"):
        library.relu(x, y, torch.tensor([40], dtype=torch.int32), threads=[40], group_size=[32])


def test_thread_sanitizer_catches_a_missing_barrier() -> None:
    """A planted bug: the product's threads refilling the panels while others still read them."""
    source = _launch.source()
    last = source.rindex("threadgroup_barrier(mem_flags::mem_threadgroup);")
    library = metal_host.HostLibrary(source[:last] + source[last:].replace("threadgroup_barrier(mem_flags::mem_threadgroup);", "", 1),
                                     "tsan")
    a, b, c = torch.ones(8, 24), torch.ones(24, 8), torch.zeros(8, 8)
    values = _params.pack("GemmParams", dict(m=8, n=8, k=24, groups=1, a_group=0, b_batch=0, b_group=0, c_batch=0, c_group=0,
                                             has_bias=0, has_residual=0, activation=0))
    with pytest.raises(metal_host.SanitizerReport, match="data race"):
        library.gemm(a, b, torch.zeros(1), torch.zeros(1), c, torch.tensor(values, dtype=torch.int32),
                     threads=[8, 8, 1], group_size=[8, 8, 1])


@pytest.fixture
def as_on_a_mac(monkeypatch: pytest.MonkeyPatch, on_the_host: None) -> Iterator[None]:
    """Both backends available, on the host: their probes say yes, the kernels are the host's."""
    import algoswap_metal

    monkeypatch.setattr(algoswap_metal, "probe_mps", lambda: True)
    monkeypatch.setattr(algoswap_metal, "probe_metal", lambda: True)
    algoswap.reload_plugins()
    yield
    monkeypatch.undo()
    algoswap.reload_plugins()


def test_a_resnet_runs_on_the_metal_kernels(as_on_a_mac: None) -> None:
    """swap_backend with our kernels for what they cover, torch (mps) for the rest: the input moves once, the
    conv -> add -> relu chains fuse into the kernels' store, the output is torch's."""
    from algoswap import zoo

    net = zoo.build("resnet18").eval()
    x = zoo.sample_input("resnet18", batch=2, small=True)
    requests = {"conv2d": "metal:direct", **{op: "metal:default" for op in ("relu", "add", "maxpool2d", "adaptiveavgpool2d")}}
    model = algoswap.swap_backend(net, requests, sample_input_shape=tuple(x.shape))
    with torch.no_grad():
        out, ref = model(x), net(x)
    assert float((out - ref).abs().max()) <= 1e-4 * float(ref.abs().max()), float((out - ref).abs().max())
    rows = model.explain()
    ran = {(row.op, row.implementation) for row in rows}
    assert {("conv2d+add+relu", "metal:direct"), ("maxpool2d", "metal:direct"), ("adaptiveavgpool2d", "metal:direct"),
            ("linear", "mps:mpsgraph")} <= ran, ran
    notes = [row.note for row in rows if "moved" in row.note]
    assert len(notes) == 1 and "inputs moved host → mps" in notes[0], notes  # the input, once; nothing after


def test_check_plugin_passes_where_the_backends_run(as_on_a_mac: None) -> None:
    """algoswap check-plugin's checks, which need the backends available: every reference resolves, every
    implementation's signature takes its op's call, every supports() reads only attributes its op has."""
    report = algoswap.check_plugin("metal")
    assert report.ok, report.problems
