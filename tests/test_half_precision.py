"""float16 and bfloat16 as compute dtypes of the torch front ends (swap_backend, swap_conv2d), on the CPU
through the NumPy reference, which computes half precision in float32 and rounds each op's result once
(the conformance suite checks each implementation in both against the float64 reference)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import algoswap  # noqa: E402
from algoswap import zoo  # noqa: E402
from algoswap._runner import numpy_dtype  # noqa: E402
from algoswap._torch.errors import ConversionError  # noqa: E402
from helpers import assert_close, network_terms  # noqa: E402

HALF = ("float16", "bfloat16")


def _skip_without(dtype: str) -> None:
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")


def _float64_reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = copy.deepcopy(model).double()(x.double())
    return out


@pytest.mark.parametrize("dtype", HALF)
def test_resnet18_converted_in_half_precision_matches_the_float64_model(dtype: str) -> None:
    _skip_without(dtype)
    model, x = zoo.build("resnet18").eval(), zoo.sample_input("resnet18", 2, small=True)
    converted = algoswap.swap_backend(model, sample_input_shape=tuple(x.shape), dtype=getattr(torch, dtype))
    assert converted.dtype == dtype and converted.torch_dtype == getattr(torch, dtype)
    assert all(array.dtype == numpy_dtype(dtype) for array in converted.constants.values())
    got = converted(x)  # a float32 input, cast to the model's dtype
    assert got.dtype == getattr(torch, dtype)
    assert_close(got, _float64_reference(model, x), dtype=dtype, **network_terms(model))
    assert len(converted.folded_batchnorms) == 20 and all(row.implementation != "-" for row in converted.explain())
    array_out = converted(x.numpy())  # numpy in: numpy out in the model's dtype
    assert array_out.dtype == numpy_dtype(dtype)
    np.testing.assert_array_equal(np.asarray(array_out, np.float64), got.double().numpy())


def test_a_float16_module_converts_in_float16_and_pickles() -> None:
    module = zoo.build("convnet").eval()
    x = zoo.sample_input("convnet", 2)
    converted = algoswap.swap_backend(copy.deepcopy(module).half())  # dtype=None: the module's own
    assert converted.dtype == "float16"
    got = converted(x.half())
    assert got.dtype == torch.float16
    rounded = module.half().float()  # the float16 weights, exactly
    assert_close(got, _float64_reference(rounded, x.half().float()), dtype="float16", **network_terms(module))
    again = pickle.loads(pickle.dumps(converted))
    assert again.dtype == "float16" and torch.equal(again(x.half()), got)
    assert "dtype float16" in repr(again)


def test_batch_norms_are_folded_in_float64_and_rounded_once() -> None:
    conv, bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8, eps=0.0)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)
        # a folded weight of 1 + 2**-11 + 2**-24 - 2**-35 - 2**-47: just above a float16 tie, so rounded once it
        # is 1 + 2**-10; through float32 it becomes the tie 1 + 2**-11 first, then 1 (to even)
        conv.weight[0, 0, 0, 0], bn.weight[0], bn.running_var[0] = 1 - 2.0**-24, 1 + 2.0**-11 + 2.0**-23, 1.0
    module = nn.Sequential(conv, bn).eval()
    converted = algoswap.swap_backend(module, dtype=torch.float16)
    assert converted.folded_batchnorms == ["1"]
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    weight = (conv.weight.double() * scale.reshape(-1, 1, 1, 1)).detach().numpy()
    bias = ((conv.bias.double() - bn.running_mean.double()) * scale + bn.bias.double()).detach().numpy()
    constants = list(converted.constants.values())
    np.testing.assert_array_equal(constants[0], weight.astype(np.float16))  # one rounding, from float64
    assert constants[0][0, 0, 0, 0] == 1 + 2.0**-10
    np.testing.assert_array_equal(constants[1], bias.astype(np.float16))
    x = torch.randn(2, 3, 8, 8)
    assert_close(converted(x), _float64_reference(module, x), dtype="float16", layers=2, reduction_length=3 * 3 * 3 + 1)


def test_swap_conv2d_and_swap_operation_run_half_precision_layers() -> None:
    module = zoo.build("convnet").eval()
    half = copy.deepcopy(module).half()
    algoswap.swap_conv2d(half)
    for op in ("linear", "maxpool2d", "relu"):
        algoswap.swap_operation(op, half)
    x = zoo.sample_input("convnet", 2)
    with torch.no_grad():
        got = half(x.half())
    assert got.dtype == torch.float16
    rounded = module.half().float()  # the float16 weights, exactly
    assert_close(got, _float64_reference(rounded, x.half().float()), dtype="float16", **network_terms(module))
    rows = algoswap.explain(half)
    assert rows and all(row.implementation.startswith("numpy:") for row in rows)
    inputs = x.half().requires_grad_()
    half(inputs).sum().backward()  # the gradient ops in float16 too
    assert inputs.grad is not None and inputs.grad.dtype == torch.float16
    assert half.conv1.weight.grad is not None and half.conv1.weight.grad.dtype == torch.float16


def test_the_reference_computes_half_precision_in_float32_and_rounds_once(rng: np.random.Generator) -> None:
    x, w, b = (rng.standard_normal(s).astype(np.float16) for s in ((2, 4, 9, 9), (6, 4, 3, 3), (6,)))
    got = algoswap.ops.call("conv2d", x, w, b, algorithm="numpy:smm", padding=1)
    wide = algoswap.ops.call("conv2d", *(a.astype(np.float32) for a in (x, w, b)), algorithm="numpy:smm", padding=1)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, wide.astype(np.float16))
    # an update in place is rounded into the arrays given (the gradient, left as it is, is not written)
    param, grad, velocity = (rng.standard_normal(5).astype(np.float16) for _ in range(3))
    grad.flags.writeable = False
    expected_v = (velocity.astype(np.float32) * np.float32(0.9) + grad.astype(np.float32))
    expected_p = param.astype(np.float32) - np.float32(0.1) * expected_v
    out = algoswap.ops.call("momentum_update", param, grad, velocity, lr=0.1, momentum=0.9)
    assert out is param
    np.testing.assert_array_equal(velocity, expected_v.astype(np.float16))
    np.testing.assert_array_equal(param, expected_p.astype(np.float16))


def test_in_float32_rounds_once_and_writes_updates_back() -> None:
    """The half-precision path of the backends' array expressions (algoswap.in_float32, array-module agnostic: the
    NumPy reference's and the CUDA backend's CuPy expressions run through it): the function
    sees float32 copies of the half arrays (integer ones as they are), its result is rounded once to the
    input's dtype, inputs it updates are written back (rounded) and returned as themselves; float32 and
    float64 calls reach the function untouched."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from algoswap import in_float32

    seen: list[tuple[str, ...]] = []

    @in_float32(updated=(0, 2))
    def update(param: Any, rows: Any, state: Any, *, lr: float) -> Any:
        seen.append((param.dtype.name, rows.dtype.name, state.dtype.name))
        state += lr
        param -= state * 3
        return param

    @in_float32
    def third(x: Any) -> Any:
        return x / 3

    for dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        param, state, rows = np.full(4, 1.0, dtype), np.full(4, 0.1, dtype), np.arange(4)
        assert update(param, rows, state, lr=0.01) is param and seen[-1] == ("float32", "int64", "float32")
        wide = np.float32(dtype.type(0.1)) + np.float32(0.01)
        assert param.dtype == dtype and np.array_equal(state, np.full(4, wide).astype(dtype))
        assert np.array_equal(param, np.full(4, np.float32(1) - wide * 3).astype(dtype))
        x = np.array([1.0, 2.0, 7.0], dtype)
        assert third(x).dtype == dtype and np.array_equal(third(x), (x.astype(np.float32) / 3).astype(dtype))
    x = np.ones(3, np.float32)
    state = np.zeros(3, np.float32)
    assert update(x, np.arange(3), state, lr=1.0) is x and seen[-1] == ("float32", "int64", "float32") and state[0] == 1


def test_dtypes_outside_the_float_ones_are_refused_naming_those_accepted() -> None:
    accepted = "torch.float16, torch.bfloat16, torch.float32, torch.float64"
    module = zoo.build("convnet").eval()
    for wrong in (torch.int32, "half", torch.complex64, 16):
        with pytest.raises(ConversionError, match=f"dtype must be None, one of {accepted} or one of their names"):
            algoswap.swap_backend(module, dtype=wrong)
    with pytest.raises(ConversionError, match=f"the module's weights are torch.float8_e4m3fn; pass dtype= \\({accepted}\\)"):
        algoswap.swap_backend(copy.deepcopy(module).to(torch.float8_e4m3fn))
    assert algoswap.swap_backend(module, dtype="float16").dtype == "float16"  # a name does too
