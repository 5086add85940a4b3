"""The SYCL backend (algoswap-sycl) on this machine's SYCL device (the CPU device of Intel's OpenCL runtime).

Correctness of every sycl implementation against the reference is tested by test_conformance.py, and
every zoo model through swap_conv2d by test_zoo_swap_conv2d.py; here: the device and its programs,
availability without dpctl or a device, the device-resident path (SyclArray in, SyclArray out), kept
weights, whole models through swap_backend, gradients and threads.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import algoswap
from helpers import as_float64, assert_close, network_terms, relative_error
from algoswap.testing._scales import gradient_scales
from helpers import assert_op_close
from algoswap.testing._conformance import check_conformance

algoswap_sycl = pytest.importorskip("algoswap_sycl", reason="algoswap-sycl is not installed")

_backends = algoswap.registry().backends
_available = _backends["sycl"].availability() if "sycl" in _backends else "not loaded"
pytestmark = pytest.mark.skipif(_available is not True, reason=f"sycl backend unavailable: {_available}")

SYCL_OPS = ("conv2d", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "flatten")
CONV = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1, "padding_mode": "zeros"}


def device() -> Any:
    from algoswap_sycl._device import context

    return context()


def _run_python(code: str, **env: str | None) -> str:
    """Run ``code`` in a fresh interpreter with these environment changes (None removes a variable)."""
    environment = dict(os.environ)
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_backends_lists_the_device() -> None:
    out = _run_python("import algoswap._cli as c; c.main(['backends', '--json'])")
    rows = {row["backend"]: row for row in json.loads(out)["backends"]}
    assert rows["sycl"]["status"] == "available" and rows["sycl"]["distribution"] == "algoswap-sycl"
    assert rows["sycl"]["device"] == f"sycl {device().filter_string}"


def test_kernel_names_say_what_runs() -> None:
    shapes = [(1, 64, 28, 28), (64, 64, 3, 3), None]
    smm = algoswap.select("conv2d", shapes, algorithm="sycl:smm", padding=1).kernel
    direct = algoswap.select("conv2d", shapes, algorithm="sycl:direct", padding=1).kernel
    assert smm.startswith("pad2d + im2col + gemm") and "A read in place" in smm and "vload16" in smm
    assert direct.startswith("pad2d (split into the stride's phases) + conv_direct: 8x32") and device().filter_string in direct
    grad = algoswap.select("conv2d_grad_input", [(1, 64, 28, 28), (64, 64, 3, 3)], algorithm="sycl:default",
                           input_size=(1, 64, 28, 28), padding=1).kernel
    assert "col2im" in grad


def test_sycl_is_chosen_only_when_asked_for() -> None:
    shapes = [(1, 3, 16, 16), (4, 3, 3, 3), None]
    assert algoswap.select("conv2d", shapes).impl.backend != "sycl"
    assert algoswap.select("conv2d", shapes, algorithm="smm").impl.backend != "sycl"
    assert algoswap.select("conv2d", shapes, algorithm="sycl:default").impl.qualified == "sycl:direct"


def test_programs_are_built_once_per_device_and_dtype(rng: np.random.Generator) -> None:
    ctx = device()
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    algoswap.ops.relu(x, algorithm="sycl:direct")
    program = ctx.programs["float32"]
    kernel = ctx.kernel(np.dtype(np.float32), "relu")
    for _ in range(3):
        algoswap.ops.conv2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), None, algorithm="sycl:smm")
        algoswap.ops.relu(x, algorithm="sycl:direct")
    assert ctx.programs["float32"] is program and ctx.kernel(np.dtype(np.float32), "relu") is kernel
    assert set(ctx.programs) <= {"float32", "float64"}


def test_float64_only_where_the_device_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    shapes = [(1, 3, 8, 8), (4, 3, 3, 3), None]
    if device().fp64:
        assert algoswap.select("conv2d", shapes, "float64", "sycl:smm").impl.backend == "sycl"
    monkeypatch.setattr(device(), "fp64", False)
    algoswap.registry().selection_cache.clear()
    with pytest.raises(algoswap.NoImplementationError, match=r"has no float64 \(cl_khr_fp64\)"):
        algoswap.select("conv2d", shapes, "float64", "sycl:smm")
    algoswap.registry().selection_cache.clear()


def test_the_device_is_chosen_by_environment_or_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from algoswap_sycl import _device

    name = device().filter_string
    monkeypatch.setenv("ALGOSWAP_SYCL_DEVICE", name)
    assert _device.context().filter_string == name and _device.probe() is True
    monkeypatch.setenv("ALGOSWAP_SYCL_DEVICE", "opencl:gpu:7")
    answer = _device.probe()
    assert isinstance(answer, str) and answer.startswith("no SYCL device 'opencl:gpu:7'")
    algoswap_sycl.use_device(name)  # the option wins over the environment
    try:
        assert _device.probe() is True and _device.context().filter_string == name
    finally:
        algoswap_sycl.use_device(None)


def test_unavailable_without_dpctl_and_nothing_crashes() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'dpctl': raise ImportError('dpctl is blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np, algoswap\n"
        "reason = algoswap.registry().backends['sycl'].availability()\n"
        "print(reason)\n"
        "x = np.ones((1, 2, 4, 4), np.float32)\n"
        "print(algoswap.ops.relu(x).sum())\n"
        "try:\n"
        "    algoswap.ops.relu(x, algorithm='sycl:direct')\n"
        "except algoswap.NoImplementationError as exc:\n"
        "    print('refused:', 'backend unavailable: dpctl does not import' in str(exc))\n"
    )
    lines = _run_python(code).splitlines()
    assert lines[0].startswith("dpctl does not import: ImportError: dpctl is blocked")
    assert lines[1:] == ["32.0", "refused: True"]


def test_the_plugin_points_opencl_at_intels_runtime_unless_the_user_did() -> None:
    code = ("import os, algoswap\n"
            "print(algoswap.registry().backends['sycl'].availability())\n"
            "print(os.environ.get('OCL_ICD_FILENAMES', ''))\n")
    available, library = _run_python(code, OCL_ICD_FILENAMES=None).splitlines()
    assert available == "True" and library.endswith("libintelocl.so") and os.path.exists(library)
    available, library = _run_python(code, OCL_ICD_FILENAMES="/nonexistent/libnothing.so").splitlines()
    assert library == "/nonexistent/libnothing.so" and available.startswith("no SYCL device 'default'")


def test_the_local_memory_matrix_product_is_correct_too(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    """The variant built for devices with on-chip local memory (GPUs), run here on the CPU device."""
    import dataclasses

    from algoswap_sycl import _device, _pool

    ctx = _device.context()
    staged = dataclasses.replace(ctx, local_panel=True, programs={}, kernels={}, _resident=algoswap.LRUCache(_device.RESIDENT),
                                 pool=_pool.Pool())
    monkeypatch.setitem(_device._contexts, _device.device_name(), staged)
    assert "local-memory panel" in algoswap.select("linear", [(4, 8), (3, 8), None], algorithm="sycl:gemm").kernel
    for impl in algoswap.registry().implementations(backend="sycl"):
        if impl.algorithm in ("smm", "gemm"):
            ran, failures = check_conformance(impl, "float32", rng)
            assert ran and not failures, (impl.op, failures)
    assert "-DLOCAL_PANEL=1" in staged._options(np.dtype(np.float32))


def _through_usm(impl: algoswap.ImplRecord) -> algoswap.ImplRecord:
    """``impl`` fed SyclArrays (uploaded through the USM memory space) and checked to return one."""
    from algoswap_sycl import USM, SyclArray

    def run(*arrays: Any, **attrs: Any) -> np.ndarray:
        out = impl.callable(*(None if a is None else USM.upload(a) for a in arrays), **attrs)
        assert isinstance(out, SyclArray), f"{impl.op} returned {type(out).__name__} for device inputs"
        return np.asarray(USM.download(out))

    return algoswap.ImplRecord(impl.op, impl.algorithm, impl.backend, run, impl.dtypes, impl.supports)


@pytest.mark.parametrize("impl", algoswap.registry().implementations(backend="sycl") if "sycl" in _backends else [],
                         ids=lambda impl: f"{impl.op}-{impl.algorithm}")
def test_device_resident_arrays_in_and_out(impl: algoswap.ImplRecord, rng: np.random.Generator) -> None:
    ran, failures = check_conformance(_through_usm(impl), "float32", rng)
    assert ran and not failures, failures


def test_usm_memory_space_moves_arrays(rng: np.random.Generator) -> None:
    from algoswap_sycl import USM, SyclArray

    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    moved = USM.upload(x)
    assert isinstance(moved, SyclArray) and moved.shape == x.shape and moved.memory.sycl_device is not None
    back = USM.download(moved)  # no copy: kernels never write into an existing array
    assert np.array_equal(back, x) and np.shares_memory(back, moved.host_view())
    assert USM.name == "sycl" and not USM.is_host


def test_frozen_weights_are_copied_to_the_device_once(rng: np.random.Generator) -> None:
    import gc

    from algoswap_sycl import conv
    from algoswap_sycl._device import resident_count

    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    values = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    before = resident_count()
    expected = conv.conv2d_smm(x, values, None, **CONV)
    assert resident_count() == before  # writeable: uploaded at every call, never kept
    w = algoswap.freeze(values)
    for _ in range(3):
        np.testing.assert_array_equal(conv.conv2d_smm(x, w, None, **CONV), expected)
    assert resident_count() == before + 1
    del w
    gc.collect()
    assert resident_count() == before


def test_a_read_only_view_of_a_changing_array_is_never_kept_on_the_device(rng: np.random.Generator) -> None:
    """Issue 12, defect 2: a read-only view sees every write to its base; its device copy went stale."""
    from algoswap_sycl import conv, linear
    from algoswap_sycl._device import resident_count

    before = resident_count()
    for run, shape in ((lambda w: conv.conv2d_smm(x, w, None, **CONV), (8, 8, 3, 3)),
                       (lambda w: linear.linear(v, w, None), (5, 8))):
        x, v = rng.standard_normal((1, 8, 10, 10)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
        base = rng.standard_normal(shape).astype(np.float32)
        w = base.view()
        w.setflags(write=False)
        first = np.array(run(w))
        base *= 2
        assert relative_error(run(w), 2 * first) <= 1e-6
    assert resident_count() == before


def test_device_copies_are_bounded_by_their_cache_kind(rng: np.random.Generator) -> None:
    from algoswap_sycl import linear
    from algoswap_sycl._device import resident_count

    v = rng.standard_normal((3, 8)).astype(np.float32)
    weights = [algoswap.freeze(rng.standard_normal((5, 8)).astype(np.float32)) for _ in range(6)]
    limit = algoswap.cache_limits()["sycl_resident"].size
    try:
        algoswap.set_cache_limit("sycl_resident", 4)
        for w in weights + weights:
            np.testing.assert_allclose(linear.linear(v, w, None), v @ w.T, rtol=1e-5, atol=1e-5)
            assert resident_count() <= 4
    finally:
        algoswap.set_cache_limit("sycl_resident", limit)


@pytest.mark.parametrize("shapes, attrs", [
    (((2, 3, 11, 10), (4, 3, 2, 2)), {"stride": 3, "dilation": 2, "padding": 1}),  # taps read phases 0 and 2 of 3
    (((1, 5, 9, 23), (7, 5, 3, 3)), {"stride": (2, 1), "padding": (1, 0), "padding_mode": "reflect"}),
    (((3, 4, 20, 40), (17, 4, 1, 1)), {"stride": 2}),  # one phase of four; 16-wide loads inside the rows
])
def test_direct_reads_the_phases_of_the_stride(rng: np.random.Generator, shapes: Any, attrs: dict[str, Any]) -> None:
    x, w = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    got = algoswap.ops.conv2d(x, w, None, algorithm="sycl:direct", **attrs)
    want = algoswap.ops.conv2d(x.astype(np.float64), w.astype(np.float64), None, algorithm="numpy:smm", **attrs)
    assert_op_close("conv2d", got, want, [x, w, None], attrs)


@pytest.mark.parametrize("chunk_bytes", [1, 12000, 2**30])  # 1, 2 (then 1) and all 5 images per product
def test_smm_takes_images_in_chunks(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator, chunk_bytes: int) -> None:
    from algoswap_sycl import conv

    monkeypatch.setattr(conv, "SMM_CHUNK_BYTES", chunk_bytes)
    for shapes, attrs in [(((5, 4, 9, 8), (6, 2, 3, 3), (6,)), {"groups": 2, "padding": 1, "stride": (2, 1)}),
                          (((3, 4, 6, 5), (6, 2, 1, 1), None), {"groups": 2})]:  # 1x1: the input is the matrix
        x, w = (rng.standard_normal(s).astype(np.float32) for s in shapes[:2])
        b = None if shapes[2] is None else rng.standard_normal(shapes[2]).astype(np.float32)
        got = algoswap.ops.conv2d(x, w, b, algorithm="sycl:smm", **attrs)
        want = algoswap.ops.conv2d(x.astype(np.float64), w.astype(np.float64), None if b is None else b.astype(np.float64),
                                   algorithm="numpy:smm", **attrs)
        assert_op_close("conv2d", got, want, [x, w, b], attrs, context=f"chunks of {chunk_bytes} bytes, {shapes}")


def test_scratch_memory_is_reused_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from algoswap_sycl import _device, _pool

    ctx, f32 = _device.context(), np.dtype(np.float32)
    first = ctx.empty((1000,), f32, temporary=True).memory
    ctx.wait()  # the op is over: its temporaries go back to the pool
    assert ctx.empty((1000,), f32, temporary=True).memory is first
    ctx.wait()
    monkeypatch.setattr(_pool, "MAX_BYTES", 0)
    dropped = ctx.empty((1234,), f32, temporary=True).memory
    ctx.wait()
    assert all(memory is not dropped for memory in ctx.pool.free.get(1234 * 4, []))


def test_output_memory_comes_back_when_every_view_of_it_is_gone() -> None:
    import gc

    from algoswap_sycl import _device

    ctx, f32 = _device.context(), np.dtype(np.float32)
    out = ctx.empty((999,), f32)
    address = out.memory._pointer
    view = out.host_view()
    view[...] = 7
    del out
    gc.collect()
    assert all(m._pointer != address for m in ctx.pool.free.get(999 * 4, []))  # the host view still uses it
    again = ctx.empty((999,), f32)
    assert again.memory._pointer != address and np.all(view == 7)
    del view
    gc.collect()
    assert ctx.empty((999,), f32).memory._pointer == address


def test_writeable_weights_changed_in_place_are_seen(rng: np.random.Generator) -> None:
    from algoswap_sycl import conv

    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    first = conv.conv2d_direct(x, w, None, **CONV)
    w *= 2
    np.testing.assert_array_equal(conv.conv2d_direct(x, w, None, **CONV), 2 * first)  # scaling by 2 commutes with rounding


def test_resnet18_swap_backend_on_sycl_matches_torch() -> None:
    """The whole model asked for one backend: every step on sycl (its add included), the conv → add →
    relu chains fused into conv2d_fused calls, values kept in USM between steps."""
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model, x = zoo.build("resnet18"), zoo.sample_input("resnet18", 2, small=True)
    with torch.no_grad():
        expected = model(x)
    converted = algoswap.swap_backend(model, "sycl:default", sample_input_shape=tuple(x.shape))
    unfused = algoswap.swap_backend(model, "sycl:default", sample_input_shape=tuple(x.shape), fuse=False)
    with torch.no_grad():
        got, plain = converted(x), unfused(x)
    assert_close(got, expected, **network_terms(model), context="fused")
    assert_close(plain, expected, **network_terms(model), context="unfused")
    rows = list(converted.explain())
    assert converted.backends() == ["sycl"] and {row.implementation.split(":")[0] for row in rows} == {"sycl"}
    fused = [row.op for row in rows if "+" in row.op]
    assert fused.count("conv2d+add+relu") == 8 and fused.count("conv2d+relu") == 9, fused
    assert not [row.name for row in rows if "moved" in row.note and "host" not in row.note.split("→")[0]]


def test_gradients_run_on_sycl_and_match_torch() -> None:
    torch = pytest.importorskip("torch")
    from algoswap._torch.bridge import gradient_choices

    conv = torch.nn.Conv2d(6, 8, 3, stride=2, padding=(1, 2), groups=2, padding_mode="reflect")
    for algorithm in ("sycl:smm", "sycl:direct"):
        swapped = algoswap.swap_conv2d(copy.deepcopy(conv), algorithm)
        x = torch.randn(2, 6, 11, 9, requires_grad=True)
        theirs, mine = (torch.autograd.grad(m(x).square().sum(), [x, *m.parameters()]) for m in (conv, swapped))
        y = conv(x)
        scales = gradient_scales("conv2d", [as_float64(x), as_float64(conv.weight), as_float64(conv.bias)],
                                 {"stride": 2, "padding": (1, 2), "groups": 2, "padding_mode": "reflect"}, 2 * y, y)
        for name, a, b in zip(("input", "weight", "bias"), mine, theirs):
            scale, length = scales[name]
            assert_close(a, b, reduction_length=length, scale=scale, context=f"{algorithm}: gradient of {name}")
    call = algoswap.select("conv2d", [(2, 6, 11, 9), (8, 3, 3, 3), (8,)], algorithm="sycl:smm",
                           stride=2, padding=(1, 2), groups=2, padding_mode="reflect")
    assert all(choice.selection.impl.backend == "sycl" for choice in gradient_choices(call))


def test_a_small_cnn_trains_through_sycl_layers() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                          nn.ReLU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 5))
    reference = copy.deepcopy(model)
    for op in ("conv2d", "relu", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "flatten", "linear"):
        algoswap.swap_operation(op, model, "sycl:default")
    x = torch.randn(4, 3, 12, 12)
    model(x).logsumexp(1).sum().backward()
    reference(x).logsumexp(1).sum().backward()
    rows = algoswap.explain(model)
    assert len(rows) == 9 and all(row.implementation.startswith("sycl:") for row in rows)
    backward = [label for row in rows for label in row.backward if "reshape" not in label]
    assert len(backward) == 14 and all(" sycl:" in label and "fallback" not in label for label in backward), backward
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        assert_close(mine.grad, theirs.grad, **network_terms(reference, backward_of=tuple(x.shape)))


def test_one_model_on_sycl_from_four_threads() -> None:
    torch = pytest.importorskip("torch")
    from algoswap import zoo

    model = zoo.build("convnet")
    for op in ("conv2d", "relu", "maxpool2d", "linear"):
        algoswap.swap_operation(op, model, "sycl:default")
    batches = [torch.randn(zoo.input_shape("convnet", 2, small=True)) for _ in range(4)]
    with torch.no_grad():
        expected = [model(x) for x in batches]

    def work(i: int) -> list[Any]:
        with torch.no_grad():  # per thread
            return [model(batches[i]) for _ in range(5)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for got, want in zip(results, expected):
        for g in got:
            assert_close(g, want, **network_terms(model))
