"""bfloat16 on the oneDNN backend: declared in the capability table, refused where the CPU would run
oneDNN's reference kernel, and a whole swap_backend model in bfloat16 (the conformance suite covers
each implementation in bfloat16 against the float64 reference)."""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest

import algoswap
from algoswap import zoo
from helpers import assert_close, hardware_refusal, network_terms

pytest.importorskip("algoswap_dnnl")
ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

REFUSED = "oneDNN refuses a bfloat16 convolution on this CPU: "
BF16_OPS = ("conv2d", "conv2d_fused", "linear", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "relu", "add")


def test_the_capability_table_declares_bfloat16_for_forward_ops_only() -> None:
    tables = algoswap.capabilities(backend="dnnl").tables
    for op in BF16_OPS:
        assert any("bfloat16" in cell.dtypes for cell in tables[op].rows["dnnl"].values() if cell.supported), op
    assert tables["conv2d_grad_input"].rows["dnnl"]["direct"].dtypes == ("float32",)


def test_a_reference_kernel_in_bfloat16_is_refused_with_a_reason() -> None:
    from algoswap_dnnl._ext import refusal

    reference = types.SimpleNamespace(impl="ref:any")
    assert refusal(lambda: reference, "float32") is True
    reason = refusal(lambda: reference, "bfloat16")
    assert isinstance(reason, str) and "no bfloat16 kernel" in reason and "ref:any" in reason


def test_runs_bfloat16_is_the_convolution_predicates_answer() -> None:
    """algoswap_dnnl.runs_bfloat16 (what skips the bfloat16 tests here and elsewhere on a CPU without bf16
    kernels) says what the conv2d predicates say of the convolution it asks about, once per process."""
    from algoswap_dnnl import runs_bfloat16

    available = algoswap.registry().backends["dnnl"].availability()
    if available is not True:
        assert runs_bfloat16() == f"dnnl unavailable: {available}"
        return
    call = algoswap.registry().spec("conv2d").bind([(1, 64, 28, 28), (64, 64, 3, 3), None], ["bfloat16", "bfloat16", None],
                                                  {"padding": 1})
    runs = runs_bfloat16()
    for algorithm in ("direct", "auto"):
        refused = algoswap.registry().impls[("conv2d", algorithm, "dnnl")].check(call)
        assert (runs is True and refused is True) or (isinstance(refused, str) and runs == REFUSED + refused), (runs, refused)
    assert runs_bfloat16() is runs  # cached


def test_resnet18_in_bfloat16_matches_float32_torch() -> None:
    if refusal := hardware_refusal("dnnl", "bfloat16"):
        pytest.skip(refusal)
    model, x = zoo.build("resnet18").eval(), zoo.sample_input("resnet18", 2, small=True)
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape), dtype=torch.bfloat16)
    with torch.no_grad():
        expected = model(x)
    got = converted(x)
    assert got.dtype == torch.bfloat16
    assert_close(got, expected, dtype="bfloat16", **network_terms(model))
    rows = converted.explain()
    convs = [row for row in rows if row.op.startswith("conv2d")]
    assert len(convs) == 20 and all(row.implementation.startswith("dnnl:") and not row.kernel.startswith("ref") for row in convs)
    array_out = converted(x.numpy())  # numpy in: bfloat16 numpy out
    assert array_out.dtype == np.dtype(ml_dtypes.bfloat16)
    assert_close(array_out, got, **network_terms(model))


def test_bfloat16_weights_and_fallback_nodes() -> None:
    if refusal := hardware_refusal("dnnl", "bfloat16"):
        pytest.skip(refusal)

    class WithGelu(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(self.conv(x))  # no registry op: runs in torch, in bfloat16

    module = WithGelu().eval()
    x = torch.randn(2, 3, 10, 10)
    converted = algoswap.swap_backend(module.to(torch.bfloat16), fallback="torch")
    assert converted.dtype == "bfloat16"  # the module's own dtype
    with torch.no_grad():
        expected = module.float()(x)
    assert_close(converted(x), expected, dtype="bfloat16", layers=2, reduction_length=3 * 3 * 3 + 1)  # conv, gelu


def test_swap_conv2d_runs_bfloat16_layers_on_dnnl() -> None:
    if refusal := hardware_refusal("dnnl", "bfloat16"):
        pytest.skip(refusal)
    conv = torch.nn.Conv2d(64, 32, 3, padding=1).to(torch.bfloat16)
    swapped = algoswap.swap_conv2d(torch.nn.Sequential(copy.deepcopy(conv)), "dnnl:auto")
    x = torch.randn(2, 64, 14, 14, dtype=torch.bfloat16)
    with torch.no_grad():
        wide = copy.deepcopy(conv).float()
        expected = wide(x.float())
        terms = torch.nn.functional.conv2d(x.float().abs(), wide.weight.abs(), wide.bias.abs(), padding=1)
        got = swapped(x)
    assert got.dtype == torch.bfloat16
    assert_close(got, expected, reduction_length=64 * 3 * 3 + 1, scale=terms)
    with torch.no_grad():  # the reference serves bfloat16 too (in float32, rounded once)
        reference = algoswap.swap_conv2d(torch.nn.Sequential(copy.deepcopy(conv)), "numpy:smm")(x)
    assert reference.dtype == torch.bfloat16
    assert_close(reference, expected, reduction_length=64 * 3 * 3 + 1, scale=terms)
